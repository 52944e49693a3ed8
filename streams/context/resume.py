"""The resume tail: the latest complete tool round the cutoff hid from the current invocation.

When a summary made during the current invocation covers part of it, the
model would otherwise no longer see that it already ran a tool, and may run it
again. Only one round comes back; earlier covered rounds live in the summary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from schemas import Message, SessionEvent


@dataclass(frozen=True, slots=True)
class ResumeRound:
    """Indices (into the event list) of the call event and of its result events."""

    call_index: int
    call_ids: tuple[str, ...]
    result_indices: tuple[int, ...]


def latest_complete_round(
    events: Sequence[SessionEvent],
    messages: Sequence[Message | None],
    covered: Sequence[bool],
    current_index: int | None,
) -> ResumeRound | None:
    """The covered tool round of the current invocation that completed last.

    Candidates are covered events of the current invocation other than its
    user input. A call event qualifies when every one of its call ids has a
    result after it among the candidates (parallel calls come back together);
    the one whose last result is latest wins, a later call breaking ties.
    """
    if current_index is None or not events[current_index].invocation_id:
        return None
    invocation = events[current_index].invocation_id
    candidates = [
        i
        for i, event in enumerate(events)
        if covered[i]
        and i != current_index
        and event.invocation_id == invocation
        and (msg := messages[i]) is not None
        and msg.role in ("assistant", "tool")
    ]
    best: ResumeRound | None = None
    best_last = -1
    for position, c in enumerate(candidates):
        call_msg = messages[c]
        if call_msg is None or call_msg.role != "assistant" or not call_msg.tool_calls:
            continue
        ids = tuple(dict.fromkeys(call.id for call in call_msg.tool_calls))
        found: dict[str, int] = {}
        for r in candidates[position + 1 :]:
            msg = messages[r]
            if msg is None or msg.role != "tool" or msg.tool_call_id not in ids:
                continue
            found.setdefault(msg.tool_call_id, r)
        if len(found) != len(ids):
            continue
        last = max(found.values())
        if last >= best_last:
            best_last = last
            best = ResumeRound(c, ids, tuple(sorted(found.values())))
    return best
