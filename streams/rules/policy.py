"""``SummaryPolicy``: the checks, targets and counter the trigger engine applies.

Build it from settings (``summary`` section, TOML per-app overrides under
``[summary.apps.<app>]``) with :func:`policies_from_settings`, or directly in
Python (custom callables, nested ``checks_any`` / ``checks_all``). When no check
is configured the Go guide's main example applies (:func:`default_checks`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from schemas.settings import SummarySettings
from streams.rules.checks import (
    AllOf,
    AnyOf,
    Check,
    ContextThreshold,
    ConversationThreshold,
    EventThreshold,
    ImportantContent,
    TimeThreshold,
    TokenThreshold,
    important_keywords,
)
from streams.rules.context_windows import DEFAULT_FALLBACK_WINDOW, lookup_context_window
from streams.rules.targets import Allowlist, allows_filter_key, normalize_allowlist, summary_targets
from streams.rules.tokens import SimpleTokenCounter, TiktokenCounter, TokenCounter

DEFAULT_EVENT_THRESHOLD = 20
DEFAULT_TOKEN_THRESHOLD = 4000
DEFAULT_TIME_THRESHOLD_S = 300.0
DEFAULT_MAX_SUMMARY_WORDS = 200

CHECK_FIELDS = frozenset(
    {
        "event_threshold",
        "token_threshold",
        "time_threshold_s",
        "context_threshold",
        "conversation_threshold",
        "important_content_threshold",
        "important_keywords",
        "composition",
    }
)
"""Settings fields that define the checks."""


def default_checks() -> tuple[Check, ...]:
    """Any of: more than 20 events, more than 4000 tokens, an idle gap over 5 minutes."""
    return (
        AnyOf(
            (
                EventThreshold(DEFAULT_EVENT_THRESHOLD),
                TokenThreshold(DEFAULT_TOKEN_THRESHOLD),
                TimeThreshold(DEFAULT_TIME_THRESHOLD_S),
            )
        ),
    )


@dataclass(frozen=True)
class SummaryPolicy:
    """How one app's sessions are triggered.

    ``checks`` are ANDed at the top level; ``()`` fires whenever there is
    summarizable content. ``counter`` ``None`` means the process-wide counter.
    ``context`` is merged into the context dict custom checks receive.
    ``important_keywords`` is derived from the :class:`ImportantContent` checks:
    the fold flags the events that contain one.
    ``keep_recent_rounds`` / ``skip_recent_events`` are the summarizer's (the same
    settings): the events a summary holds back do not count toward the next
    trigger, and no job is emitted while a pass would hold back everything
    (see :mod:`streams.rules.held_back`).
    """

    checks: tuple[Check, ...] = field(default_factory=default_checks)
    allowlist: Allowlist = None
    cascade_full_session: bool = True
    counter: TokenCounter | None = None
    max_summary_words: int | None = DEFAULT_MAX_SUMMARY_WORDS
    job_timeout_s: float = 120.0
    job_max_attempts: int = 5
    failure_cooldown_s: float = 30.0
    failure_cooldown_max_s: float = 1800.0
    context: Mapping[str, Any] = field(default_factory=dict)
    keep_recent_rounds: int = 0
    skip_recent_events: int = 0
    important_keywords: tuple[str, ...] = field(init=False, default=())

    def __post_init__(self) -> None:
        object.__setattr__(self, "important_keywords", important_keywords(self.checks))

    @property
    def job_timeout_us(self) -> int:
        return int(self.job_timeout_s * 1_000_000)

    def cooldown_us(self, failures: int) -> int:
        """The cooldown after ``failures`` given-up jobs in a row (0 for none): exponential, capped."""
        if failures <= 0 or self.failure_cooldown_s <= 0:
            return 0
        cap = max(self.failure_cooldown_max_s, self.failure_cooldown_s)
        return int(min(cap, self.failure_cooldown_s * 2.0 ** min(failures - 1, 60)) * 1_000_000)

    def targets(self, filter_key: str) -> tuple[str, ...]:
        """``summary_targets`` with this policy's allowlist and cascade."""
        return summary_targets(filter_key, self.allowlist, self.cascade_full_session)

    def allows(self, filter_key: str) -> bool:
        return allows_filter_key(filter_key, self.allowlist)


def context_fallback_window(
    settings: SummarySettings, model: str | None = None, model_context_window: int | None = None
) -> int:
    """The context threshold's fallback window: the configured one, else the
    summary model's (``model_context_window``, then ``model`` in the registry),
    else 8192 — as Go's ``WithContextThreshold`` without an explicit fallback."""
    for window in (settings.context_fallback_window, model_context_window, lookup_context_window(model)):
        if window is not None and window > 0:
            return window
    return DEFAULT_FALLBACK_WINDOW


def checks_from_settings(
    settings: SummarySettings, *, model: str | None = None, model_context_window: int | None = None
) -> tuple[Check, ...]:
    """The configured thresholds, combined by ``composition``; the default when none is set.

    ``composition="all"`` (the default) ANDs them as both guides do;
    ``"any"`` ORs them. With nothing configured the result is
    :func:`default_checks`, which is an explicit any-of. ``model`` and
    ``model_context_window`` (the summary LLM) give the context threshold its
    fallback window, see :func:`context_fallback_window`.
    """
    checks: list[Check] = []
    if settings.event_threshold is not None:
        checks.append(EventThreshold(settings.event_threshold))
    if settings.token_threshold is not None:
        checks.append(TokenThreshold(settings.token_threshold))
    if settings.time_threshold_s is not None:
        checks.append(TimeThreshold(settings.time_threshold_s))
    if settings.context_threshold:
        checks.append(
            ContextThreshold(
                settings.context_ratio,
                settings.context_min_tokens,
                context_fallback_window(settings, model, model_context_window),
            )
        )
    if settings.conversation_threshold is not None:
        checks.append(ConversationThreshold(settings.conversation_threshold))
    keywords = tuple(settings.important_keywords or ())
    if settings.important_content_threshold is not None or any(k.strip() for k in keywords):
        checks.append(ImportantContent(settings.important_content_threshold, keywords))
    if not checks:
        return default_checks()
    if len(checks) == 1:
        return (checks[0],)
    return (AnyOf(tuple(checks)) if settings.composition == "any" else AllOf(tuple(checks)),)


def counter_from_settings(settings: SummarySettings, model: str | None = None) -> TokenCounter:
    """The configured counter: tiktoken with ``model``'s encoding (else the
    configured default encoding), or the simple counter with its divisor.

    ``model`` is the summary LLM's name (``settings.llm.model``); the trigger
    policy and the summarizer budget must be built with the same one.
    """
    if settings.token_counter == "tiktoken":
        return TiktokenCounter(model, settings.tiktoken_default_encoding)
    return SimpleTokenCounter(settings.approx_runes_per_token)


def policy_from_settings(
    settings: SummarySettings,
    *,
    model: str | None = None,
    model_context_window: int | None = None,
    **python_overrides: Any,
) -> SummaryPolicy:
    """One policy from a settings section; keyword overrides (e.g. custom ``checks``) win.

    ``model`` (the LLM model name) selects the tiktoken encoding, see :func:`counter_from_settings`;
    it and ``model_context_window`` (``llm.context_window``) set the context threshold's fallback window.
    """
    values: dict[str, Any] = {
        "checks": checks_from_settings(settings, model=model, model_context_window=model_context_window),
        "allowlist": normalize_allowlist(settings.filter_key_allowlist),
        "cascade_full_session": settings.cascade_full_session,
        "counter": counter_from_settings(settings, model),
        "max_summary_words": settings.max_summary_words or None,
        "job_timeout_s": settings.job_timeout_s,
        "keep_recent_rounds": settings.keep_recent_rounds,
        "skip_recent_events": settings.skip_recent_events,
        "job_max_attempts": settings.job_max_attempts,
        "failure_cooldown_s": settings.failure_cooldown_s,
        "failure_cooldown_max_s": settings.failure_cooldown_max_s,
    }
    values.update(python_overrides)
    return SummaryPolicy(**values)


@dataclass(frozen=True)
class PolicySet:
    """The default policy plus per-app policies; :meth:`for_app` picks one."""

    default: SummaryPolicy = field(default_factory=SummaryPolicy)
    apps: Mapping[str, SummaryPolicy] = field(default_factory=dict)

    def for_app(self, app_name: str) -> SummaryPolicy:
        return self.apps.get(app_name, self.default)


def policies_from_settings(
    settings: SummarySettings, model: str | None = None, *, model_context_window: int | None = None
) -> PolicySet:
    """Default policy from ``settings``; each ``apps.<app>`` table overrides its fields.

    An app table that sets any check field (:data:`CHECK_FIELDS`) replaces the
    base's checks as a whole rather than adding to them.

    An app table is merged over the base section, then validated as a ``SummarySettings``, so a typo is an error.
    ``model`` (the LLM model name, ``settings.llm.model``) selects the tiktoken
    encoding, as in the summarizer (:func:`streams.summarizer.build_summarizer`);
    with ``model_context_window`` (``settings.llm.context_window``) it gives the
    context threshold its fallback window (:func:`context_fallback_window`).
    """
    base = settings.model_dump(exclude={"apps"}, exclude_unset=True)
    apps: dict[str, SummaryPolicy] = {}
    for app, overrides in settings.apps.items():
        merged = dict(base)
        if CHECK_FIELDS & overrides.keys():
            for name in CHECK_FIELDS:
                merged.pop(name, None)
        merged.update(overrides)
        app_settings = SummarySettings.model_validate(merged)
        apps[app] = policy_from_settings(app_settings, model=model, model_context_window=model_context_window)
    return PolicySet(policy_from_settings(settings, model=model, model_context_window=model_context_window), apps)
