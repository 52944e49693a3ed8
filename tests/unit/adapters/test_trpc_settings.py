"""The guide's summarizer configuration becomes the app's distill summary settings, or a clear error."""

from __future__ import annotations

import pytest

from schemas.settings import Settings
from streams.adapters.trpc_settings import UnsupportedSummarizerConfigError, summary_overrides, with_app_overrides
from streams.rules.policy import policies_from_settings

sessions = pytest.importorskip("trpc_agent_sdk.sessions", exc_type=ImportError)
from trpc_agent_sdk.sessions import (  # noqa: E402
    set_summarizer_check_functions_by_and,
    set_summarizer_check_functions_by_or,
    set_summarizer_conversation_threshold,
    set_summarizer_events_count_threshold,
    set_summarizer_important_content_threshold,
    set_summarizer_time_interval_threshold,
    set_summarizer_token_threshold,
)

CHECKS = {"conversation_threshold", "token_threshold", "event_threshold", "time_threshold_s",
          "important_content_threshold"}  # fmt: skip


def _set(overrides: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in overrides.items() if k in CHECKS and v is not None}


def test_each_helper_maps_onto_its_threshold() -> None:
    assert _set(summary_overrides([set_summarizer_conversation_threshold(3)])) == {"conversation_threshold": 3}
    assert _set(summary_overrides([set_summarizer_token_threshold(1000)])) == {"token_threshold": 1000}
    assert _set(summary_overrides([set_summarizer_events_count_threshold(30)])) == {"event_threshold": 30}
    assert _set(summary_overrides([set_summarizer_time_interval_threshold(10)])) == {"time_threshold_s": 10}
    assert _set(summary_overrides([set_summarizer_important_content_threshold()])) == {
        "important_content_threshold": 10
    }
    assert _set(summary_overrides(None)) == {"conversation_threshold": 100}  # the guide's default check


def test_and_or_compositions() -> None:
    plain = summary_overrides([set_summarizer_conversation_threshold(1), set_summarizer_token_threshold(1000)])
    assert plain["composition"] == "all" and _set(plain) == {"conversation_threshold": 1, "token_threshold": 1000}
    anded = summary_overrides([set_summarizer_check_functions_by_and([
        set_summarizer_conversation_threshold(1), set_summarizer_time_interval_threshold(10)])])  # fmt: skip
    assert anded["composition"] == "all" and _set(anded) == {"conversation_threshold": 1, "time_threshold_s": 10}
    ored = summary_overrides([set_summarizer_check_functions_by_or([
        set_summarizer_conversation_threshold(1), set_summarizer_time_interval_threshold(10)])])  # fmt: skip
    assert ored["composition"] == "any" and _set(ored) == {"conversation_threshold": 1, "time_threshold_s": 10}


def test_what_distill_cannot_express_is_refused_by_name() -> None:
    mixed = [set_summarizer_token_threshold(5), set_summarizer_check_functions_by_or(
        [set_summarizer_conversation_threshold(1), set_summarizer_time_interval_threshold(10)])]  # fmt: skip
    with pytest.raises(UnsupportedSummarizerConfigError, match="OR of several checks inside an AND"):
        summary_overrides(mixed)
    with pytest.raises(UnsupportedSummarizerConfigError, match="not one of the guide's helpers"):
        summary_overrides([lambda session: True])
    with pytest.raises(UnsupportedSummarizerConfigError, match="conversation_threshold is set twice"):
        summary_overrides([set_summarizer_conversation_threshold(1), set_summarizer_conversation_threshold(2)])


def test_the_worker_builds_the_apps_policy_from_them() -> None:
    overrides = summary_overrides([set_summarizer_conversation_threshold(3)], max_summary_length=600,
                                  keep_recent_count=4, summarizer_prompt="总结：\n{conversation_text}")  # fmt: skip
    assert (overrides["max_summary_length"], overrides["keep_recent_rounds"]) == (600, 4)
    settings = with_app_overrides(Settings(summary={"event_threshold": 50}), "guide_app", overrides)
    policies = policies_from_settings(settings.summary)
    app, default = policies.for_app("guide_app"), policies.for_app("other")
    assert [type(c).__name__ for c in app.checks] == ["ConversationThreshold"]
    assert [type(c).__name__ for c in default.checks] == ["EventThreshold"]
