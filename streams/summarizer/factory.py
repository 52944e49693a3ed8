"""Building the configured summarizer from settings.

With an API key or a base URL configured (``DISTILL_LLM__API_KEY`` /
``DISTILL_LLM__BASE_URL``) the OpenAI-compatible endpoint answers;
otherwise the embedded extractive summarizer does, with no network.

Every configured summarizer is checked at startup (:func:`validate_summarizers`):
a prompt that breaks a rule fails the worker with the app and the rule named,
instead of dead-lettering every job of that app.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from schemas.settings import LLMSettings, Settings, SummarySettings
from streams.errors import ConfigurationError
from streams.rules.policy import counter_from_settings
from streams.rules.tokens import SimpleTokenCounter, TokenCounter
from streams.summarizer.conversation import DEFAULT_FORMATTER, ConversationFormatter
from streams.summarizer.extractive import ExtractiveModel
from streams.summarizer.hooks import SummaryHooks
from streams.summarizer.model import SummaryModel
from streams.summarizer.selection import combine_skips, keep_recent_rounds, skip_last
from streams.summarizer.summarizer import Summarizer


def build_model(llm: LLMSettings) -> SummaryModel:
    """The OpenAI adapter when an endpoint is configured, else the extractive model."""
    if llm.configured:
        # Imported here so that only a configured endpoint pulls in the openai SDK.
        from streams.summarizer.openai_adapter import OpenAIChatModel

        return OpenAIChatModel(llm)
    return ExtractiveModel()


def summary_settings_for(settings: Settings, app_name: str | None) -> SummarySettings:
    """``settings.summary`` with the ``[summary.apps.<app_name>]`` overrides applied."""
    overrides: dict[str, Any] = settings.summary.apps.get(app_name or "", {}) if app_name else {}
    if not overrides:
        return settings.summary
    merged = {**settings.summary.model_dump(), **overrides}
    return SummarySettings.model_validate(merged)


def validate_summarizers(settings: Settings) -> None:
    """Build the summarizer of ``[summary]`` and of every ``[summary.apps.<app>]`` override, or fail.

    Raises :class:`~streams.errors.ConfigurationError` naming the section
    (and the app) and the broken rule, e.g. ``[summary.apps.support] (app
    'support'): prompt.conversation_text_required: ...``. No model is built
    and nothing is called.
    """
    for app_name in (None, *sorted(settings.summary.apps)):
        where = "[summary]" if app_name is None else f"[summary.apps.{app_name}] (app {app_name!r})"
        try:
            build_summarizer(settings, app_name=app_name, model=ExtractiveModel(), token_counter=SimpleTokenCounter())
        except ValidationError as exc:
            details = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise ConfigurationError(f"{where}: invalid summary override: {details}") from exc
        except (ConfigurationError, ValueError) as exc:
            raise ConfigurationError(f"{where}: {exc}") from exc


def build_summarizer(
    settings: Settings,
    *,
    app_name: str | None = None,
    model: SummaryModel | None = None,
    hooks: SummaryHooks | None = None,
    formatter: ConversationFormatter = DEFAULT_FORMATTER,
    token_counter: TokenCounter | None = None,
) -> Summarizer:
    """The summarizer the worker runs for ``app_name`` (prompts validated here).

    Without an injected ``token_counter`` the request budget is counted with the
    counter the trigger policy uses (``summary.token_counter``, tiktoken with
    the encoding of ``llm.model``), so triggers and budget never disagree.
    """
    summary = summary_settings_for(settings, app_name)
    skip = combine_skips(
        skip_last(summary.skip_recent_events) if summary.skip_recent_events else None,
        keep_recent_rounds(summary.keep_recent_rounds) if summary.keep_recent_rounds else None,
    )
    chosen = model or build_model(settings.llm)
    return Summarizer(
        chosen,
        prompt=summary.prompt,
        system_prompt=summary.system_prompt,
        fork_prompt=summary.fork_prompt,
        cache_safe_forking=summary.cache_safe_forking,
        empty_answer_retries=summary.empty_answer_retries,
        max_summary_words=summary.max_summary_words,
        max_summary_length=summary.max_summary_length,
        formatter=formatter,
        skip_recent=skip,
        hooks=hooks,
        context_window=settings.llm.context_window if settings.llm.configured else None,
        token_counter=token_counter or counter_from_settings(summary, settings.llm.model),
        name=app_name or "default",
    )
