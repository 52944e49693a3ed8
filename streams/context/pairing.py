"""Tool-call pairing repair: the structural guarantee behind every assembled request.

Chat-completions accepts a tool result only right after the assistant message
that made the call, and an assistant call only when all its results follow.
Cutoffs, branch filters, pending calls and dropped rounds can all break that;
this pass restores it without inventing content.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from streams.context.items import HistoryItem


@dataclass(slots=True)
class PairingReport:
    """What the repair removed."""

    unanswered_calls: int = 0
    orphan_results: int = 0
    duplicate_results: int = 0
    emptied_assistant_turns: int = 0


@dataclass(slots=True)
class _Slot:
    item: HistoryItem
    call_ids: list[str]
    results: dict[str, HistoryItem] = field(default_factory=dict)


def repair_pairing(items: Sequence[HistoryItem]) -> tuple[list[HistoryItem], PairingReport]:
    """Reorder and prune so every call is answered right after it and every result is expected.

    A result is matched to the latest earlier call with its id that is still
    unanswered and moved directly after that call (keeping call order). Calls
    that get no result — pending, long-running, or cut away — are removed
    from their assistant message; the message goes too when nothing is left.
    Results with no open call, and second results for one call, are dropped.
    """
    report = PairingReport()
    order: list[_Slot | HistoryItem] = []
    open_calls: dict[str, _Slot] = {}
    answered: set[str] = set()
    for item in items:
        msg = item.message
        if msg.role == "assistant" and msg.tool_calls:
            ids = list(dict.fromkeys(call.id for call in msg.tool_calls))
            slot = _Slot(item, ids)
            for call_id in ids:
                open_calls[call_id] = slot
            order.append(slot)
        elif msg.role == "tool":
            call_id = msg.tool_call_id or ""
            owner = open_calls.pop(call_id, None)
            if owner is not None:
                owner.results[call_id] = item
                answered.add(call_id)
            elif call_id in answered:
                report.duplicate_results += 1
            else:
                report.orphan_results += 1
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
        out.extend(entry.results[cid] for cid in answered_ids)
    return out, report
