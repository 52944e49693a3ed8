"""The facade's settings: Go's llmagent options (names, defaults, meaning) and what they make of a request."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from schemas.settings import AgentSettings, Settings
from streams.agent.options import assembly_options, budget_of, compaction_config, refresh_at

GO_DEFAULTS = {
    "session_summary_injection_mode": "system",  # WithSessionSummaryInjectionMode
    "max_history_runs": 0,  # WithMaxHistoryRuns
    "sync_summary_intra_run": False,  # WithSyncSummaryIntraRun
    "enable_context_compaction": False,  # WithEnableContextCompaction
    "context_compaction_threshold_ratio": 0.7,
    "context_compaction_tool_result_max_tokens": 1024,
    "context_compaction_oversized_tool_result_max_tokens": 0,
    "context_compaction_keep_recent_requests": 1,
    "force_clean_tool_names": [],
    "keep_tool_names": [],
}


def test_defaults_are_gos_but_summary_injection_and_recall() -> None:
    agent = AgentSettings()
    assert {k: getattr(agent, k) for k in GO_DEFAULTS} == GO_DEFAULTS
    # The two documented departures: with them off a request that must shrink can only drop history.
    assert agent.add_session_summary is True and agent.enable_on_demand_session is True
    assert agent.token_tailoring is True


def test_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISTILL_AGENT__SESSION_SUMMARY_INJECTION_MODE", "user")
    monkeypatch.setenv("DISTILL_AGENT__ENABLE_CONTEXT_COMPACTION", "true")
    monkeypatch.setenv("DISTILL_AGENT__KEEP_TOOL_NAMES", '["grep"]')
    agent = Settings().agent
    assert agent.session_summary_injection_mode == "user" and agent.enable_context_compaction
    assert agent.keep_tool_names == ["grep"]


@pytest.mark.parametrize(
    ("field", "value"),
    [("session_summary_injection_mode", "assistant"), ("max_history_runs", -1),
     ("context_compaction_threshold_ratio", 0), ("context_window", 0), ("bogus", 1)],
)  # fmt: skip
def test_bad_values_name_the_field(field: str, value: object) -> None:
    with pytest.raises(ValidationError, match=field):
        AgentSettings.model_validate({field: value})


def test_assembly_options_follow_the_settings() -> None:
    agent = AgentSettings(
        session_summary_injection_mode="user", max_history_runs=3, enable_context_compaction=True,
        context_compaction_tool_result_max_tokens=200, force_clean_tool_names=["shell"], keep_tool_names=["grep"],
        context_window=10_000, reserved_output_tokens=1000,
    )  # fmt: skip
    options = assembly_options(agent, filter_key="app/b", model="gpt-4o")
    assert options.injection_mode == "user" and options.max_history_runs == 3 and options.filter_key == "app/b"
    assert options.compaction.enabled and options.compaction.tool_result_max_tokens == 200
    assert options.compaction.force_clean_tool_names == {"shell"}
    assert options.compaction.keep_tool_names == {"grep", "session_search", "session_load"}  # recall answers stay
    assert options.token_budget == 9000  # the configured window wins over the model's
    assert options.recall.search and options.recall.load


def test_budget_and_refresh_threshold() -> None:
    assert budget_of(AgentSettings(), "gpt-4o") == 128000 - 2048
    assert budget_of(AgentSettings(), "no-such-model") == 8192 - 2048
    assert budget_of(AgentSettings(token_tailoring=False), "gpt-4o") is None
    # Go's pre-call refresh needs compaction and summaries on.
    assert refresh_at(AgentSettings(), "gpt-4o") is None
    assert refresh_at(AgentSettings(enable_context_compaction=True), None) == 5734
    assert refresh_at(AgentSettings(enable_context_compaction=True, add_session_summary=False), None) is None


def test_recall_off_offers_nothing_and_keeps_only_the_configured_names() -> None:
    agent = AgentSettings(enable_on_demand_session=False, keep_tool_names=["grep"])
    assert not assembly_options(agent, filter_key="", model=None).recall.any
    assert compaction_config(agent).keep_tool_names == {"grep"}
