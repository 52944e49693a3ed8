"""Token tailoring, the last guard: fit a budget by dropping whole rounds, oldest first.

A round starts at a user message and runs to the next one, so a tool call and
its results (which the pairing repair placed right after the call) always
leave together.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from schemas import Message
from streams.context.notes import event_span, recall_hint
from streams.rules.eligibility import is_user_turn_message
from streams.rules.tokens import TokenCounter

DROPPED_MARK = "[distill: left out to fit the model's window"
"""Starts the request's note naming the events of the rounds tailoring dropped (in the latest user turn)."""


@dataclass(frozen=True, slots=True)
class TailoringResult:
    """The kept messages (head first), how many were dropped, and the final count."""

    messages: list[Message]
    dropped: int
    tokens: int
    over_budget: bool
    dropped_indices: tuple[int, ...] = ()
    """Indices into ``body`` of the dropped messages (what the request must then name)."""


def dropped_note(event_ids: Sequence[str], *, session_load: bool) -> str:
    """The request's note naming the events whose messages tailoring dropped (``""``: none).

    Tailoring is the last resort, after every payload cut and a forced summary:
    what it drops after the boundary is in no summary yet, so the request says
    which events are missing and how to read them back. The dropped rounds are
    the oldest, so the note names them as a range with a count
    (:func:`.notes.event_span`): its size does not grow with the session.
    """
    if not event_ids:
        return ""
    where = recall_hint(session_load, many=True)
    return f"{DROPPED_MARK} (the oldest rounds, after every payload cut): {event_span(event_ids)}; {where}]"


def round_starts(body: Sequence[Message]) -> list[int]:
    """Indices where a round begins: 0 and every user message after it."""
    return [0, *(i for i, m in enumerate(body) if is_user_turn_message(m) and i > 0)] if body else []


def _unit_starts(body: Sequence[Message], start: int) -> list[int]:
    return [i for i in range(start, len(body)) if body[i].role != "tool"]


def tailor(
    head: Sequence[Message],
    body: Sequence[Message],
    budget: int | None,
    counter: TokenCounter,
    *,
    overhead: int = 0,
    costs: Sequence[int] | None = None,
) -> TailoringResult:
    """Keep ``head`` (the system message and fixed prefix) and as much of ``body`` as fits.

    ``overhead`` is counted against the budget but not sent as a message (the
    tool declarations). Oldest rounds go first; the latest round always stays.
    If that is still too much, its oldest steps (an assistant message with its
    tool results) go, keeping the round's opening user message and its last
    step. What remains may still exceed the budget: ``over_budget`` says so.
    ``costs`` are the body's token counts when the caller has them already
    (it tailors the same body more than once).
    """
    head_tokens = overhead + sum(counter.count_message(m) for m in head)
    costs = list(costs) if costs is not None else [counter.count_message(m) for m in body]
    total = head_tokens + sum(costs)
    if budget is None or total <= budget:
        return TailoringResult([*head, *body], 0, total, False)
    starts = round_starts(body)
    first = 0
    for r in range(1, len(starts)):
        if total <= budget:
            break
        total -= sum(costs[starts[r - 1] : starts[r]])
        first = starts[r]
    kept = list(range(first, len(body)))
    if total > budget and kept:
        anchor = first if is_user_turn_message(body[first]) else None
        units = _unit_starts(body, first + (anchor is not None))
        drop: set[int] = set()
        for u in range(len(units) - 1):
            if total <= budget:
                break
            end = units[u + 1]
            drop.update(range(units[u], end))
            total -= sum(costs[units[u] : end])
        kept = [i for i in kept if i not in drop]
    messages = [*head, *(body[i] for i in kept)]
    gone = tuple(sorted(set(range(len(body))) - set(kept)))
    return TailoringResult(messages, len(gone), total, total > budget, gone)
