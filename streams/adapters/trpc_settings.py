"""The Python guide's summarizer configuration → distill's per-app summary settings.

The guide configures a ``SessionSummarizer`` with check functions
(``set_summarizer_conversation_threshold(3)``, ...), ``max_summary_length``,
``keep_recent_count`` and ``summarizer_prompt``. In distill the worker decides,
from the app's ``[summary.apps.<app>]`` overrides, so the same configuration is
translated into those overrides:

=============================================  =====================================
guide                                          distill ``summary`` field
=============================================  =====================================
``set_summarizer_conversation_threshold(n)``   ``conversation_threshold = n``
``set_summarizer_token_threshold(n)``          ``token_threshold = n``
``set_summarizer_events_count_threshold(n)``   ``event_threshold = n``
``set_summarizer_time_interval_threshold(s)``  ``time_threshold_s = s``
``set_summarizer_important_content_threshold`` ``important_content_threshold = n``
``set_summarizer_check_functions_by_and``      ``composition = "all"`` (also a plain list)
``set_summarizer_check_functions_by_or``       ``composition = "any"``
``max_summary_length``                         ``max_summary_length``
``keep_recent_count``                          ``keep_recent_rounds``
``summarizer_prompt``                          ``prompt`` (``{conversation_text}``)
=============================================  =====================================

The check functions are read from the closures the trpc helpers return
(trpc-agent-py 1.2.0). A combination distill cannot express (an OR nested in
an AND with other checks, the same check twice, a custom function) is refused
with :class:`UnsupportedSummarizerConfigError` naming it, rather than run with
different triggers. Pure: nothing here imports trpc.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from schemas.settings import Settings, SummarySettings
from streams.errors import ConfigurationError

_THRESHOLDS: dict[str, tuple[str, str]] = {
    "set_summarizer_conversation_threshold": ("conversation_count", "conversation_threshold"),
    "set_summarizer_token_threshold": ("token_count", "token_threshold"),
    "set_summarizer_events_count_threshold": ("event_count", "event_threshold"),
    "set_summarizer_time_interval_threshold": ("time_interval", "time_threshold_s"),
    "set_summarizer_important_content_threshold": ("important_content_count", "important_content_threshold"),
}
_COMBINATORS = {"set_summarizer_check_functions_by_and": "all", "set_summarizer_check_functions_by_or": "any"}
GUIDE_DEFAULT_CHECK = {"conversation_threshold": 100}
"""The guide: with no check functions, ``set_summarizer_conversation_threshold(100)`` applies."""


class UnsupportedSummarizerConfigError(ConfigurationError):
    """A summarizer setting of the guide that distill's per-app settings cannot express."""


def _helper(fn: Callable[..., Any]) -> tuple[str, dict[str, Any]]:
    """The trpc helper that built ``fn`` and the values it closed over."""
    qualname = getattr(fn, "__qualname__", "")
    helper = qualname.split(".<locals>.", 1)[0] if ".<locals>." in qualname else ""
    code = getattr(fn, "__code__", None)
    cells = getattr(fn, "__closure__", None) or ()
    names = code.co_freevars if code is not None else ()
    return helper, {name: cell.cell_contents for name, cell in zip(names, cells, strict=False)}


def _name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


def _leaf(fn: Callable[..., Any]) -> tuple[str, Any] | None:
    helper, values = _helper(fn)
    if helper in _THRESHOLDS:
        arg, field = _THRESHOLDS[helper]
        return field, values[arg]
    return None


def _group(fn: Callable[..., Any]) -> tuple[str, list[Callable[..., Any]]] | None:
    helper, values = _helper(fn)
    if helper in _COMBINATORS:
        return _COMBINATORS[helper], list(values.get("funcs") or [])
    return None


def _flatten(funcs: Iterable[Callable[..., Any]], mode: str) -> tuple[dict[str, Any], str]:
    """The thresholds of ``funcs`` combined with ``mode``; a single nested group takes over the mode."""
    funcs = list(funcs)
    if len(funcs) == 1 and (group := _group(funcs[0])) is not None:
        return _flatten(group[1], group[0])
    fields: dict[str, Any] = {}
    for fn in funcs:
        group = _group(fn)
        if group is not None:
            inner, inner_mode = _flatten(group[1], group[0])
            if inner_mode != mode and len(inner) > 1:
                raise UnsupportedSummarizerConfigError(
                    f"{_name(fn)}: an {'OR' if inner_mode == 'any' else 'AND'} of several checks inside an "
                    f"{'AND' if mode == 'all' else 'OR'} is not expressible as distill summary settings "
                    "(one composition per app); flatten the checks"
                )
            leaves = list(inner.items())
        else:
            leaf = _leaf(fn)
            if leaf is None:
                raise UnsupportedSummarizerConfigError(
                    f"check function {_name(fn)} is not one of the guide's helpers; distill's worker decides "
                    "when to summarize, so write it as a custom check (streams.rules.checks) instead"
                )
            leaves = [leaf]
        for field, value in leaves:
            if field in fields and fields[field] != value:
                raise UnsupportedSummarizerConfigError(f"{field} is set twice ({fields[field]!r} and {value!r})")
            fields[field] = value
    return fields, mode


def summary_overrides(
    check_functions: Sequence[Callable[..., Any]] | None,
    *,
    max_summary_length: int | None = None,
    keep_recent_count: int | None = None,
    summarizer_prompt: str | None = None,
    default_prompt: str | None = None,
) -> dict[str, Any]:
    """The ``[summary.apps.<app>]`` overrides standing for a guide summarizer configuration.

    Every threshold field is set (``None`` when not configured), so the app's
    checks are exactly the guide's, whatever the global ``[summary]`` says. A
    ``summarizer_prompt`` equal to ``default_prompt`` (the SDK's own default)
    keeps distill's prompt.
    """
    fields, mode = _flatten(check_functions, "all") if check_functions else (dict(GUIDE_DEFAULT_CHECK), "all")
    out: dict[str, Any] = {field: None for _, field in _THRESHOLDS.values()}
    out.update(fields)
    out["composition"] = mode
    if max_summary_length is not None:
        out["max_summary_length"] = max_summary_length
        out["max_summary_words"] = None
    if keep_recent_count is not None:
        out["keep_recent_rounds"] = keep_recent_count
    if summarizer_prompt is not None and summarizer_prompt != default_prompt:
        out["prompt"] = summarizer_prompt
    SummarySettings.model_validate(out)  # a wrong value fails here, naming the field
    return out


def with_app_overrides(settings: Settings, app_name: str, overrides: dict[str, Any]) -> Settings:
    """``settings`` with ``overrides`` as the summary settings of ``app_name`` (for the worker)."""
    data = settings.model_dump()
    data["summary"]["apps"] = {**data["summary"].get("apps", {}), app_name: dict(overrides)}
    data["llm"]["api_key"] = settings.llm.api_key
    return Settings(**data)
