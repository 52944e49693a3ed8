"""Tool-call pairing repair: the structural guarantee behind every assembled request.

Chat-completions accepts a tool result only right after the assistant message
that made the call, and an assistant call only when all its results follow.
Cutoffs, branch filters, pending calls and dropped rounds can all break that;
this pass restores it without inventing content.

A call answered more than once (a long-running tool's interim "pending"
result, then its final one) keeps its latest result in the call's place; the
kept result says which earlier result it replaced, so the replaced event stays
recallable by id.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from schemas import Message
from schemas.pairing import Pairer, Step, pair_steps
from streams.context.items import HistoryItem
from streams.context.notes import event_list, recall_hint

REPLACED_MARK = "[distill: replaces earlier result"
"""Starts the note appended to a result that replaced an earlier one of its call."""
LEFT_OUT_MARK = "[distill: left out to keep every tool call answered"
"""Starts the note naming the events whose calls or results the repair left out."""


@dataclass(frozen=True, slots=True)
class ReplacedResult:
    """An earlier result of ``tool_call_id`` (event ``event_id``) replaced by a later one (``by_event_id``)."""

    tool_call_id: str
    event_id: str | None
    by_event_id: str | None


@dataclass(slots=True)
class PairingReport:
    """What the repair removed or replaced."""

    unanswered_calls: int = 0
    orphan_results: int = 0
    replaced_results: list[ReplacedResult] = field(default_factory=list)
    emptied_assistant_turns: int = 0
    left_out: list[str] = field(default_factory=list)
    """Ids of the events a call or a result of which was left out (in no summary when after the boundary)."""


@dataclass(slots=True)
class _Slot:
    item: HistoryItem
    call_ids: list[str]
    results: dict[str, HistoryItem] = field(default_factory=dict)
    replaced: dict[str, list[str | None]] = field(default_factory=dict)

    def replace(self, call_id: str, item: HistoryItem) -> ReplacedResult:
        earlier = self.results[call_id]
        self.replaced.setdefault(call_id, []).append(earlier.event_id)
        self.results[call_id] = item
        return ReplacedResult(call_id, earlier.event_id, item.event_id)

    def result(self, call_id: str) -> HistoryItem:
        item = self.results[call_id]
        replaced = self.replaced.get(call_id)
        if not replaced:
            return item
        return item.with_message(item.message.model_copy(update={"content": _with_note(item, replaced)}))


def _with_note(item: HistoryItem, replaced: list[str | None]) -> str:
    ids = ", ".join(event_id or "unknown" for event_id in replaced)
    note = f"{REPLACED_MARK}(s) of this call; event_id={ids}]"
    content = item.message.content or ""
    return f"{content}\n\n{note}" if content else note


def pair_results(messages: Sequence[Message | None]) -> dict[int, int]:
    """Which call each tool result answers: result index → index of the assistant message holding the call.

    The rule of :mod:`schemas.pairing` (ids reused across turns pair within their turn: a result answers
    the nearest earlier call with its id that no result answered yet, else the id's latest call). ``None``
    entries (events a prompt shows nothing of) are skipped.
    """
    return pair_steps([None if msg is None else _step(msg) for msg in messages]).answers


def _step(msg: Message) -> Step:
    """``msg`` as a position of the rule (call ids are never empty: a result without one answers none)."""
    if msg.role == "tool":
        return msg.tool_call_id or ""
    if msg.tool_calls and msg.role == "assistant":
        return [call.id for call in msg.tool_calls]
    return None


def repair_pairing(items: Sequence[HistoryItem]) -> tuple[list[HistoryItem], PairingReport]:
    """Reorder and prune so every call is answered right after it and every result is expected.

    A result is matched as :mod:`schemas.pairing` says — the nearest earlier
    call with its id that is still unanswered — and moved directly after that
    call (keeping call order). Calls that get no result — pending,
    long-running, or cut away — are removed from their assistant message; the
    message goes too when nothing is left. Results with no call are dropped.
    A later result for an answered call (no open call with its id) replaces
    the result of the id's latest call, and the kept result
    ends with a note naming the replaced events.
    """
    report = PairingReport()
    pairer = Pairer()
    order: list[_Slot | HistoryItem] = []
    slots: dict[int, _Slot] = {}
    for i, item in enumerate(items):
        msg = item.message
        if msg.role == "assistant" and msg.tool_calls:
            slot = slots[i] = _Slot(item, list(dict.fromkeys(call.id for call in msg.tool_calls)))
            pairer.calls(i, slot.call_ids)
            order.append(slot)
        elif msg.role == "tool":
            call_id = msg.tool_call_id or ""
            found = pairer.result(call_id)
            if found is None:
                report.orphan_results += 1
                _note_left_out(report, item.event_id)
            elif found[1]:
                report.replaced_results.append(slots[found[0]].replace(call_id, item))
            else:
                slots[found[0]].results[call_id] = item
        else:
            order.append(item)
    out: list[HistoryItem] = []
    for entry in order:
        if isinstance(entry, HistoryItem):
            out.append(entry)
            continue
        answered_ids = [cid for cid in entry.call_ids if cid in entry.results]
        report.unanswered_calls += len(entry.call_ids) - len(answered_ids)
        msg = entry.item.message
        if len(answered_ids) != len(msg.tool_calls):
            if len(answered_ids) < len(entry.call_ids):
                _note_left_out(report, entry.item.event_id)
            seen: set[str] = set()
            calls = []
            for call in msg.tool_calls:
                if call.id in entry.results and call.id not in seen:
                    seen.add(call.id)
                    calls.append(call)
            msg = msg.model_copy(update={"tool_calls": tuple(calls)})
        if not msg.tool_calls and not msg.content:
            report.emptied_assistant_turns += 1
            continue
        out.append(entry.item.with_message(msg))
        out.extend(entry.result(cid) for cid in answered_ids)
    return out, report


def replaced_by(replaced: Iterable[ReplacedResult]) -> dict[str, list[str]]:
    """By the id of each kept result, every earlier result of its call it replaced (directly or through
    a result it replaced in turn): what the note on the kept result names."""
    direct: dict[str, list[str]] = {}
    for r in replaced:
        if r.by_event_id and r.event_id:
            direct.setdefault(r.by_event_id, []).append(r.event_id)
    out: dict[str, list[str]] = {}
    for kept in direct:
        found: list[str] = []
        todo = list(direct[kept])
        while todo:
            eid = todo.pop()
            if eid not in found and eid != kept:
                found.append(eid)
                todo.extend(direct.get(eid, ()))
        out[kept] = found
    return out


def _note_left_out(report: PairingReport, event_id: str | None) -> None:
    if event_id and event_id not in report.left_out:
        report.left_out.append(event_id)


def left_out_note(event_ids: Sequence[str], *, session_load: bool) -> str:
    """The request's note naming the events a call or a result of which the request leaves out.

    A call without its result (a tool cancelled mid-reply, one still pending), a result without its
    call, a call without a function name and a result without a call id are refused by the API; after
    the boundary no summary holds them yet: the note names their events, which stay stored. ``event_ids``
    in log order: each is named, up to :data:`.notes.NOTE_IDS_LISTED` (the newest), the older ones
    beyond by their count and the ids the log holds them between (:func:`.notes.event_list`).
    """
    if not event_ids:
        return ""
    where = recall_hint(session_load, many=True)
    return (
        f"{LEFT_OUT_MARK} (a call without its result, or a result without its call): {event_list(event_ids)}; {where}]"
    )
