"""From stored events to the history the model sees: visibility, cutoff, restorations, runs.

``skip_summarization`` events get no rule of their own here, and that is the
rule (DESIGN §2): never in a summary's input (the summarizer drops them), they
are visible like any event while they lie after the boundary and hidden once a
boundary passes them; their payload stays stored and recallable
(``session_search`` / ``session_load``).
"""

from __future__ import annotations

from collections.abc import Collection, Container, Sequence
from dataclasses import dataclass

from schemas import Message, SessionEvent, SummaryBoundary
from streams.context.items import HistoryItem, Origin
from streams.context.notes import event_span, recall_hint
from streams.context.pairing import pair_results
from streams.context.resume import ResumeRound, latest_complete_round
from streams.rules.boundaries import events_after
from streams.rules.eligibility import is_user_turn_message, shown_message


def covered_mask(
    events: Sequence[SessionEvent], boundary: SummaryBoundary | None, log: Sequence[SessionEvent] | None = None
) -> list[bool]:
    """For each event, whether ``boundary`` covers it: the complement of the delta of ``streams.rules``.

    The summarizer and this module must agree on where a summary ends, so the
    rule is the shared one (``streams.rules.boundaries.events_after``): an
    event-id boundary is exact — what the list holds after the boundary
    event is after it, whatever its timestamp (the list is the session's log
    order, the order the summarizer reads) —; without a known id, events
    strictly older than ``cutoff_at`` are covered and events at the cutoff stay.

    ``log``: the events ``events`` were taken from (every filter key), when
    ``events`` may leave the boundary event out (an ancestor's summary ending
    at another branch's event): its place in ``log`` decides. An event of
    ``events`` that ``log`` does not hold counts as logged after all of it.
    """
    base: Sequence[SessionEvent] = events
    if log is not None and log is not events:
        logged = {id(event) for event in log}
        base = [*log, *(event for event in events if id(event) not in logged)]
    after = {id(event) for event in events_after(base, boundary)}
    return [id(event) not in after for event in events]


def event_message(event: SessionEvent) -> Message | None:
    """The message an event contributes to a prompt, or ``None`` when it contributes none.

    Streaming chunks (``partial``) and system events never reach the prompt
    (the request has exactly one system message, built by the assembly). An
    error event with no text gets ``type: <t>, message: <m>`` as its content.
    Calls without a function name are dropped (their results become orphans).
    Assistant turns with neither text nor calls, user turns without text and
    tool results without a ``tool_call_id`` are dropped: the API rejects them.
    """
    if event.partial:
        return None
    if event.message.role == "system":
        return None
    msg = shown_message(event)
    if msg.role == "tool":
        if not msg.tool_call_id:
            return None
        return msg if msg.content is not None else msg.model_copy(update={"content": ""})
    if msg.role == "assistant":
        calls = tuple(call for call in msg.tool_calls if call.function.name)
        if len(calls) != len(msg.tool_calls):
            msg = msg.model_copy(update={"tool_calls": calls})
        return msg if msg.content or msg.tool_calls else None
    if msg.role == "user" and msg.content:
        return msg
    return None


@dataclass(frozen=True, slots=True)
class Projection:
    """The projected history and what the cutoff did to it."""

    items: list[HistoryItem]
    covered_events: int = 0
    restored_events: int = 0
    resume_events: int = 0
    left_out: tuple[str, ...] = ()
    """Events after the boundary whose payload :func:`event_message` could not show (a tool result without
    a call id, a call without a function name): the request names them."""


def _item(event: SessionEvent, message: Message, origin: Origin) -> HistoryItem:
    return HistoryItem(message, event.event_id, event.request_id, event.invocation_id, origin)


def project_history(
    events: Sequence[SessionEvent],
    boundary: SummaryBoundary | None,
    current_index: int | None = None,
    log: Sequence[SessionEvent] | None = None,
) -> Projection:
    """Apply the summary cutoff to ``events`` (already filtered to the agent's key, in log order).

    ``log``: the unfiltered events they come from (see :func:`covered_mask`).

    Kept: events after the boundary and the current user message (always).
    Brought back from the covered part, at their original positions:

    - a tool-call event whose result is retained, reduced to the needed calls;
    - the resume tail of the current invocation (see :mod:`.resume`);
    - a covered user message of a turn whose retained part starts with an
      assistant or tool message, so the turn keeps its question.
    """
    messages = [event_message(e) for e in events]
    covered = covered_mask(events, boundary, log)
    chosen: dict[int, HistoryItem] = {}
    for i, (event, msg) in enumerate(zip(events, messages, strict=True)):
        if msg is None:
            continue
        if i == current_index:
            chosen[i] = _item(event, msg, "current")
        elif not covered[i]:
            chosen[i] = _item(event, msg, "history")
    n_covered = sum(1 for i, c in enumerate(covered) if c and messages[i] is not None and i != current_index)
    left_out = tuple(e.event_id for e, c in zip(events, covered, strict=True) if not c and _unshowable(e))
    if not n_covered:
        return Projection([chosen[i] for i in sorted(chosen)], left_out=left_out)

    needed_calls = calls_for_retained_results(messages, covered, chosen)
    resume = latest_complete_round(events, messages, covered, current_index)
    resume_indices: set[int] = set()
    if resume is not None:
        needed_calls.setdefault(resume.call_index, set()).update(resume.call_ids)
        resume_indices = {resume.call_index, *resume.result_indices}
    restored = 0
    for j, ids in needed_calls.items():
        msg = messages[j]
        assert msg is not None
        chosen[j] = _item(events[j], calls_alone(msg, ids), "resume" if j in resume_indices else "restored")
        restored += j not in resume_indices
    for r in _result_indices(resume):
        msg = messages[r]
        assert msg is not None
        chosen[r] = _item(events[r], msg, "resume")
    restored += _restore_user_anchors(events, messages, covered, chosen)
    return Projection(
        [chosen[i] for i in sorted(chosen)],
        covered_events=n_covered,
        restored_events=restored,
        resume_events=len(resume_indices),
        left_out=left_out,
    )


def _unshowable(event: SessionEvent) -> bool:
    """Whether :func:`event_message` leaves out a payload of ``event`` the API could not take."""
    msg = event.message
    if event.partial or msg.role == "system":
        return False
    if msg.role == "tool":
        return not msg.tool_call_id and bool(msg.content)
    return any(not call.function.name for call in msg.tool_calls)


def _result_indices(resume: ResumeRound | None) -> tuple[int, ...]:
    return () if resume is None else resume.result_indices


def calls_alone(message: Message, ids: Collection[str]) -> Message:
    """``message`` as a covered call event kept for some of its calls shows it: those calls alone (its text,
    its reasoning and its other calls are the summary's; a call shown without its result is refused)."""
    calls = tuple(call for call in message.tool_calls if call.id in ids)
    return message.model_copy(update={"tool_calls": calls, "content": None, "reasoning_content": None})


def calls_for_retained_results(
    messages: Sequence[Message | None], covered: Sequence[bool], chosen: Container[int]
) -> dict[int, set[str]]:
    """Covered call events (index → call ids) that retained tool results answer.

    ``chosen``: the indices of the messages kept (after the boundary, and the current one). A kept
    result answers the call :func:`.pairing.pair_results` pairs it with (the nearest earlier call with
    its id still unanswered: ids reused across turns pair within their turn); when that call is covered,
    its event is brought back for that call only (its other calls may have results the boundary covers).
    """
    needed: dict[int, set[str]] = {}
    for r, j in pair_results(messages).items():
        result = messages[r]
        if r in chosen and j not in chosen and covered[j] and result is not None:
            needed.setdefault(j, set()).add(result.tool_call_id or "")
    return needed


def _restore_user_anchors(
    events: Sequence[SessionEvent],
    messages: Sequence[Message | None],
    covered: Sequence[bool],
    chosen: dict[int, HistoryItem],
) -> int:
    seen_turns: set[tuple[str, str]] = set()
    restored = 0
    for i in sorted(chosen):
        event = events[i]
        turn = (event.request_id, event.invocation_id)
        if turn == ("", "") or turn in seen_turns:
            continue
        seen_turns.add(turn)
        if is_user_turn_message(chosen[i].message):
            continue
        for j in range(i - 1, -1, -1):
            msg = messages[j]
            if (
                covered[j]
                and msg is not None
                and is_user_turn_message(msg)
                and (events[j].request_id, events[j].invocation_id) == turn
            ):
                chosen[j] = _item(events[j], msg, "restored")
                restored += 1
                break
    return restored


RUNS_LEFT_OUT_MARK = "[distill: earlier runs left out of this request"


def runs_note(event_ids: Sequence[str], max_runs: int, *, session_load: bool) -> str:
    """The request's note naming the events of the runs ``max_history_runs`` leaves out (``""``: none).

    Go's ``WithMaxHistoryRuns`` drops them without a word; with summaries off no summary
    stands in for them either, so the request says that earlier runs exist, which events they
    are and how to read them back (a range and a count, :func:`.notes.event_span`).
    """
    if not event_ids:
        return ""
    where = recall_hint(session_load, many=True)
    return f"{RUNS_LEFT_OUT_MARK} (only the last {max_runs} are sent): {event_span(event_ids)}; {where}]"


def select_runs(items: Sequence[HistoryItem], max_runs: int) -> list[HistoryItem]:
    """The last ``max_runs`` runs (a run starts at a user message); 0 keeps everything."""
    if max_runs <= 0:
        return list(items)
    starts = [i for i, item in enumerate(items) if is_user_turn_message(item.message)]
    if len(starts) <= max_runs:
        return list(items)
    return list(items[starts[-max_runs] :])
