"""The facade's settings (``schemas.settings.AgentSettings``, Go's llmagent options) as assembly options.

Pure: no I/O. ``DistillAgent`` calls :func:`assembly_options` once per request.
"""

from __future__ import annotations

from schemas.settings import AgentSettings
from streams.context.assembly import AssemblyOptions
from streams.context.compaction import CompactionConfig
from streams.context.fitting import model_window, refresh_threshold, request_budget
from streams.context.injection import SummaryFormatter
from streams.context.recall_tools import SESSION_LOAD, SESSION_SEARCH, RecallCapabilities
from streams.rules.tokens import ScriptAwareTokenCounter, SimpleTokenCounter, TiktokenCounter, TokenCounter


def compaction_config(agent: AgentSettings) -> CompactionConfig:
    """Go's ``WithContextCompaction*`` / ``WithToolResultCompactionConfig`` values.

    With the recall tools on, their results are kept whole, as Go's guide
    recommends (``KeepToolNames: session_load, session_search``): a recall
    answer replaced by a placeholder would send the model back for it.
    """
    keep = set(agent.keep_tool_names)
    if agent.enable_on_demand_session:
        keep |= {SESSION_SEARCH, SESSION_LOAD}
    return CompactionConfig(
        enabled=agent.enable_context_compaction,
        keep_recent_requests=agent.context_compaction_keep_recent_requests,
        tool_result_max_tokens=agent.context_compaction_tool_result_max_tokens,
        oversized_tool_result_max_tokens=agent.context_compaction_oversized_tool_result_max_tokens,
        force_clean_tool_names=frozenset(agent.force_clean_tool_names),
        keep_tool_names=frozenset(keep),
    )


def recall_capabilities(agent: AgentSettings) -> RecallCapabilities:
    """Both recall tools with ``enable_on_demand_session`` (distill's read side implements both), else none."""
    on = agent.enable_on_demand_session
    return RecallCapabilities(search=on, load=on)


def window_of(agent: AgentSettings, model: str | None) -> int:
    return model_window(agent.context_window, model)


def counter_of(agent: AgentSettings, model: str | None) -> TokenCounter:
    """The counter requests are fitted with (``token_counter``); never the process-wide one the worker uses."""
    if agent.token_counter == "tiktoken":
        return TiktokenCounter(model)
    if agent.token_counter == "simple":
        return SimpleTokenCounter()
    return ScriptAwareTokenCounter()


def budget_of(agent: AgentSettings, model: str | None) -> int | None:
    """The request budget with ``token_tailoring`` (window less the reply's room), else ``None``."""
    if not agent.token_tailoring:
        return None
    return request_budget(window_of(agent, model), agent.reserved_output_tokens)


def refresh_at(agent: AgentSettings, model: str | None) -> int | None:
    """Prompt tokens from which a summary is asked before the call (compaction and summaries on), else ``None``."""
    if not (agent.enable_context_compaction and agent.add_session_summary):
        return None
    return refresh_threshold(window_of(agent, model), agent.context_compaction_threshold_ratio)


def assembly_options(
    agent: AgentSettings,
    *,
    filter_key: str,
    model: str | None,
    summary_formatter: SummaryFormatter | None = None,
) -> AssemblyOptions:
    """The :class:`AssemblyOptions` the facade's settings stand for."""
    return AssemblyOptions(
        add_session_summary=agent.add_session_summary,
        injection_mode=agent.session_summary_injection_mode,
        summary_formatter=summary_formatter,
        max_history_runs=agent.max_history_runs,
        filter_key=filter_key,
        compaction=compaction_config(agent),
        token_budget=budget_of(agent, model),
        token_counter=counter_of(agent, model),
        recall=recall_capabilities(agent),
    )
