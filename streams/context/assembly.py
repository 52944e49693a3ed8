"""The entry point: build the next chat-completions request from what the read side holds.

Order of the steps (each in its own module):

1. visibility: events of the agent's filter key, minus streaming chunks and
   system events (:mod:`.history`);
2. history: the cutoff at the summary boundary with its restorations and the
   resume tail, or the last ``max_history_runs`` runs without summaries;
3. compaction of tool results (:mod:`.compaction`), off by default;
4. pairing repair (:mod:`.pairing`): every call answered right after it;
5. cuts of tool-call arguments and message texts (:mod:`.payload_cuts`), set by fitting;
6. summary injection (:mod:`.injection`) and the recall usage note;
7. token tailoring (:mod:`.tailoring`) as the last guard; the notes naming the events left out (pairing)
   and dropped (tailoring) go into the latest user turn, after the prefix a provider caches;
8. a final validity check (:mod:`.validity`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from schemas import Message, SessionEvent, SummaryBoundary
from streams.context.compaction import CompactionConfig, CompactionStats, compact, compact_resume_tail
from streams.context.history import event_message, project_history, runs_note, select_runs
from streams.context.injection import (
    InjectionMode,
    SummaryFormatter,
    format_summary,
    merge_into_system,
    place_in_user_turn,
    place_notes,
)
from streams.context.items import HistoryItem, to_chat_message
from streams.context.pairing import PairingReport, left_out_note, repair_pairing, replaced_by
from streams.context.payload_cuts import PayloadCuts, PayloadCutStats, PayloadPeaks, cut_payloads, payload_peaks
from streams.context.recall_tools import (
    SESSION_LOAD,
    SESSION_SEARCH,
    USAGE_NOTE_MARK,
    RecallCapabilities,
    recall_tools,
    usage_note,
)
from streams.context.tailoring import TailoringResult, dropped_note, tailor
from streams.context.validity import assert_valid
from streams.errors import DistillError
from streams.rules.eligibility import is_user_turn_message
from streams.rules.filter_keys import related
from streams.rules.tokens import TokenCounter, get_token_counter

NEW_TURN_UNIT = "current:new"
"""Unit key of a current user message that is not (yet) a stored event."""


@dataclass(frozen=True)
class AssemblyOptions:
    """How the request is built. Defaults follow the guide.

    ``max_history_runs`` applies only when ``add_session_summary`` is off
    (0 = all runs). ``token_budget`` (``None`` = no tailoring) covers the
    messages and the tool declarations. ``token_counter`` should be the one
    the model layer uses; ``None`` means the process-wide counter.
    ``prefix_messages`` (few-shot examples, injected context) sit between the
    system message and the history and are never tailored away.
    """

    add_session_summary: bool = False
    injection_mode: InjectionMode = "system"
    summary_formatter: SummaryFormatter | None = None
    max_history_runs: int = 0
    filter_key: str = ""
    compaction: CompactionConfig = field(default_factory=CompactionConfig)
    token_budget: int | None = None
    token_counter: TokenCounter | None = None
    recall: RecallCapabilities = field(default_factory=RecallCapabilities)
    prefix_messages: tuple[Message, ...] = ()
    include_reasoning: bool = False
    payload_cuts: PayloadCuts = field(default_factory=PayloadCuts)
    """Arguments and message texts cut above these thresholds (fitting sets them; off by default)."""


@dataclass(frozen=True)
class AssemblyReport:
    """What the assembly did, for logs and metrics."""

    history_messages: int
    covered_events: int
    restored_events: int
    resume_events: int
    compaction: CompactionStats
    pairing: PairingReport
    tailored_messages: int
    prompt_tokens: int
    over_budget: bool
    summary_injected: bool
    payload_cuts: PayloadCutStats = field(default_factory=PayloadCutStats)
    tailored_event_ids: tuple[str, ...] = ()
    """The events whose messages tailoring dropped (named in a note in the request's latest user turn)."""
    payload_peaks: PayloadPeaks = field(default_factory=PayloadPeaks)
    """The largest tool result, arguments and message text before tailoring (fitting skips lower cuts)."""
    runs_left_out: tuple[str, ...] = ()
    """The events of the runs ``max_history_runs`` left out (summaries off); a note in the latest user turn
    names them."""


@dataclass(frozen=True)
class AssembledRequest:
    """The ``messages`` and ``tools`` to send, and the report."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    report: AssemblyReport


CurrentMessage = SessionEvent | Message | str | None


class NothingToSendError(DistillError, ValueError):
    """``assemble`` was given no system prompt, no history and no current message."""


def _tool_name(tool: Mapping[str, Any]) -> str:
    function = tool.get("function")
    return str(function.get("name", "")) if isinstance(function, Mapping) else ""


def _tools(tools: Sequence[Mapping[str, Any]], caps: RecallCapabilities) -> list[dict[str, Any]]:
    out = [dict(t) for t in tools]
    names = {_tool_name(t) for t in out}
    out.extend(t for t in recall_tools(caps) if _tool_name(t) not in names)
    return out


def _locate_current(
    events: list[SessionEvent], current: CurrentMessage
) -> tuple[int | None, HistoryItem | None, str | None]:
    """Index of the current user event, or an extra item for a new message, and the current unit."""
    if isinstance(current, SessionEvent):
        ids = [event.event_id for event in events]
        if current.event_id not in ids:
            events.append(current)
            ids.append(current.event_id)
        index = ids.index(current.event_id)
        return index, None, _unit_of(events[index])
    if isinstance(current, str | Message):
        msg = current if isinstance(current, Message) else Message(role="user", content=current)
        return None, HistoryItem(msg, origin="current"), NEW_TURN_UNIT
    for i in range(len(events) - 1, -1, -1):
        found = event_message(events[i])
        if found is not None and is_user_turn_message(found):
            return i, None, _unit_of(events[i])
    return None, None, None


def _unit_of(event: SessionEvent) -> str | None:
    return HistoryItem(event.message, event.event_id, event.request_id, event.invocation_id).unit_key


def _head(system_prompt: str, prefix: Sequence[Message]) -> tuple[list[Message], list[Message]]:
    system_parts = [system_prompt] if system_prompt else []
    system_parts += [m.content for m in prefix if m.role == "system" and m.content]
    head = [Message(role="system", content="\n\n".join(system_parts))] if system_parts else []
    return head, [m for m in prefix if m.role != "system"]


class SummaryView(Protocol):
    """What assembly needs of a summary: its text and boundary.

    A :class:`~schemas.SessionSummary` record, or the read side's
    ``SelectedSummary`` (which may be a branch's prefix aggregate).
    """

    @property
    def summary(self) -> str: ...

    @property
    def boundary(self) -> SummaryBoundary: ...


def summary_block(summary: SummaryView | None, options: AssemblyOptions) -> str:
    """The summary block the request shows (``""``: none, and no history is cut at its boundary).

    Empty when summaries are off, when there is no summary or its text is
    blank, and when the formatter renders it as nothing: the history before
    the boundary is cut only when the summary that replaces it is shown.
    """
    text = summary.summary.strip() if summary is not None else ""
    if not (options.add_session_summary and text):
        return ""
    block = format_summary(text, options.injection_mode, options.summary_formatter)
    return block if block.strip() else ""


def assemble(
    system_prompt: str,
    summary: SummaryView | None,
    events: Sequence[SessionEvent],
    current_user_message: CurrentMessage = None,
    tools: Sequence[Mapping[str, Any]] = (),
    options: AssemblyOptions | None = None,
    *,
    notes: Sequence[str] = (),
) -> AssembledRequest:
    """Build the request for the next model call.

    ``events`` are the session's stored events in log order (the order they
    were published in, which the summarizer reads: what follows the boundary
    event is after the boundary, whatever its timestamp); events after the
    summary boundary and the boundary event itself are enough, and events
    before it may be included (they are cut, and used only to restore calls,
    the resume tail and turn anchors). Events of other filter keys are left
    out, the boundary event's place among them still counts.
    ``current_user_message`` is the turn being answered: a stored event (kept
    in place, even when the boundary covers it), a new message not yet stored
    (appended), or ``None`` for the latest user event. ``notes``: ``[distill: …]``
    notes the caller needs in the request (what its read left out:
    :func:`.from_read.assemble_from_read`), put before the request's own in its
    latest user turn and counted against the budget like them. The result always
    passes :func:`streams.context.validity.find_violations`.
    """
    opts = options or AssemblyOptions()
    counter = opts.token_counter or get_token_counter()
    tool_list = _tools(tools, opts.recall)
    names = {_tool_name(t) for t in tool_list}
    visible = [e for e in events if related(e.filter_key, opts.filter_key)]
    current_index, extra, current_unit = _locate_current(visible, current_user_message)

    block = summary_block(summary, opts)
    use_summary = bool(block)
    boundary = summary.boundary if use_summary and summary is not None else None
    projection = project_history(visible, boundary, current_index, log=events)
    items = projection.items + ([extra] if extra is not None else [])
    runs_left_out: list[str] = []
    if not opts.add_session_summary:
        kept = select_runs(items, opts.max_history_runs)  # a suffix: the oldest runs go
        runs_left_out = list(dict.fromkeys(i.event_id for i in items[: len(items) - len(kept)] if i.event_id))
        items = kept

    session_load = SESSION_LOAD in names
    items, resume_stats = compact_resume_tail(items, opts.compaction, counter, session_load=session_load)
    items, stats = compact(items, opts.compaction, counter, current_unit=current_unit, session_load=session_load)
    stats.placeholders += resume_stats.placeholders
    stats.arguments_elided += resume_stats.arguments_elided
    stats.tokens_saved += resume_stats.tokens_saved
    items, pairing = repair_pairing(items)
    if not opts.include_reasoning:
        # Count what is sent: reasoning stays out of the request unless asked for.
        items = [i.with_message(i.message.model_copy(update={"reasoning_content": None}))
                 if i.message.reasoning_content else i for i in items]  # fmt: skip
    current_id = visible[current_index].event_id if current_index is not None else None
    items, cut_stats = cut_payloads(items, opts.payload_cuts, counter, current_event_id=current_id,
                                    session_load=session_load)  # fmt: skip

    head, prefix = _head(system_prompt, opts.prefix_messages)
    in_user_turn = use_summary and opts.injection_mode == "user"
    if use_summary and not in_user_turn:
        head = merge_into_system(head, block)
    log_order = {e.event_id: i for i, e in enumerate(events)}
    # In log order: the note names the newest by id and the older ones (past its bound) by where they lie.
    left_out = sorted(dict.fromkeys([*projection.left_out, *pairing.left_out]),
                      key=lambda eid: log_order.get(eid, len(log_order)))  # fmt: skip
    left_note = "\n\n".join(n for n in (
        *notes,
        runs_note(runs_left_out, opts.max_history_runs, session_load=session_load),
        left_out_note(left_out, session_load=session_load),
    ) if n)  # fmt: skip
    offered = RecallCapabilities(
        search=opts.recall.search and SESSION_SEARCH in names, load=opts.recall.load and session_load
    )
    note = usage_note(offered)
    if note and not any(m.role == "system" and USAGE_NOTE_MARK in (m.content or "") for m in head):
        head = merge_into_system(head, note)

    overhead = sum(counter.count_text(json.dumps(t, separators=(",", ":"))) for t in tool_list)
    body = [item.message for item in items]
    costs = [counter.count_message(m) for m in body]
    # A summary in a user turn is placed after tailoring (in what is kept), its tokens counted
    # beside the fixed head's: the oldest round may go, the summary never with it.
    pinned = counter.count_text(block) if in_user_turn else 0
    notes, tailored, dropped_ids = _tailor_naming_dropped(
        [*head, *prefix],
        items,
        costs,
        opts.token_budget,
        counter,
        overhead + pinned,
        left_note,
        session_load,
        stands_for=replaced_by(pairing.replaced_results),
        log_order=log_order,
    )
    sent = tailored.messages
    tokens = tailored.tokens
    if in_user_turn or notes:
        fixed = len(head) + len(prefix)
        noted = place_notes(sent[len(head) :], notes)
        split = len(noted) - (len(sent) - fixed)  # a standalone note joins the prefix
        placed_prefix, placed_body = place_in_user_turn(noted[:split], noted[split:], block if in_user_turn else "")
        sent = [*sent[: len(head)], *placed_prefix, *placed_body]
        tokens = overhead + sum(counter.count_message(m) for m in sent)
    messages = [to_chat_message(m, include_reasoning=opts.include_reasoning) for m in sent]
    if not messages:
        raise NothingToSendError("nothing to send: no system prompt, no history and no current user message")
    assert_valid(messages)
    report = AssemblyReport(
        history_messages=len(body),
        covered_events=projection.covered_events,
        restored_events=projection.restored_events,
        resume_events=projection.resume_events,
        compaction=stats,
        pairing=pairing,
        tailored_messages=tailored.dropped,
        prompt_tokens=tokens,
        over_budget=opts.token_budget is not None and tokens > opts.token_budget,
        summary_injected=use_summary,
        payload_cuts=cut_stats,
        tailored_event_ids=tuple(dropped_ids),
        runs_left_out=tuple(runs_left_out),
        payload_peaks=payload_peaks(items, costs, counter) if opts.token_budget is not None else PayloadPeaks(),
    )
    return AssembledRequest(messages, tool_list, report)


def _tailor_naming_dropped(
    fixed: list[Message],
    items: Sequence[HistoryItem],
    costs: Sequence[int],
    budget: int | None,
    counter: TokenCounter,
    overhead: int,
    left_note: str,
    session_load: bool,
    stands_for: Mapping[str, Sequence[str]] | None = None,
    log_order: Mapping[str, int] | None = None,
) -> tuple[str, TailoringResult, list[str]]:
    """Tailor, counting the request's notes: ``left_note`` and one naming the dropped events (:func:`dropped_note`).

    The notes are placed after tailoring (:func:`.injection.place_notes`), so
    their tokens count beside ``fixed`` (the system message and the prefix).
    The dropped note takes room too: tailoring runs again with it until it
    covers what is dropped. The dropped messages are the oldest, so a longer
    note only ever drops more (the dropped sets are nested) and this ends;
    when the last note covers more than is dropped, one with exactly the
    dropped events is tried and kept if it drops nothing else.

    ``stands_for``: by event id, the earlier results a kept result replaced
    (:func:`replaced_by`); only the kept one's message named them, so when it
    is dropped the note names them too, in log order (``log_order``: by event id, its place), as the
    note's range of ids reads.
    """
    body = [item.message for item in items]
    also = stands_for or {}

    def dropped_ids(indices: Sequence[int]) -> list[str]:
        ids = [eid for i in indices if (eid := items[i].event_id)]
        if not also:
            return list(dict.fromkeys(ids))
        ids = list(dict.fromkeys([*ids, *(earlier for eid in ids for earlier in also.get(eid, ()))]))
        place = log_order or {}
        return sorted(ids, key=lambda eid: place.get(eid, len(place)))

    def attempt(named: list[str]) -> tuple[str, TailoringResult, list[str]]:
        notes = "\n\n".join(n for n in (left_note, dropped_note(named, session_load=session_load)) if n)
        cost = counter.count_text(f"\n\n{notes}") if notes else 0
        tailored = tailor(fixed, body, budget, counter, overhead=overhead + cost, costs=costs)
        return notes, tailored, dropped_ids(tailored.dropped_indices)

    named: list[str] = []
    while True:
        notes, tailored, ids = attempt(named)
        if set(ids) <= set(named):
            break
        named = list(dict.fromkeys([*named, *ids]))
    if ids != named:
        exact = attempt(ids)
        if exact[2] == ids:
            return exact[0], exact[1], ids
    return notes, tailored, named
