"""Which events of a delta a pass summarizes: skip-recent, keep-recent rounds.

A *skip-recent* function returns how many trailing events to leave out of
the summary (they stay visible to the agent as raw history).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from schemas import SessionEvent
from streams.rules.eligibility import is_user_turn
from streams.summarizer.conversation import (
    DEFAULT_FORMATTER,
    ConversationFormatter,
    is_summarizable,
)

SkipRecent = Callable[[Sequence[SessionEvent]], int]
"""``events -> n``: the number of trailing events to leave unsummarized."""


def skip_last(n: int) -> SkipRecent:
    """Skip a fixed number of trailing events."""

    def skip(events: Sequence[SessionEvent]) -> int:
        return n

    return skip


def keep_recent_rounds(rounds: int) -> SkipRecent:
    """Keep the last ``rounds`` user rounds out of the summary.

    A round starts at a user turn (``eligibility.is_user_turn``: the role,
    never the author — the trigger counts rounds by the same rule) and runs
    to the next one. The cut is
    moved earlier until no tool call before it has its result after it, so
    a call and its result are never split.
    """

    def skip(events: Sequence[SessionEvent]) -> int:
        if rounds <= 0:
            return 0
        starts = [i for i, e in enumerate(events) if is_user_turn(e)]
        if len(starts) < rounds:
            return len(events)
        cut = snap_before_open_tool_calls(events, starts[-rounds])
        return len(events) - cut

    return skip


def snap_before_open_tool_calls(events: Sequence[SessionEvent], cut: int) -> int:
    """The largest ``c <= cut`` such that no tool call before ``c`` is answered at or after it."""
    result_at: dict[str, int] = {}
    for i, event in enumerate(events):
        if event.message.tool_call_id:
            result_at.setdefault(event.message.tool_call_id, i)
    c = cut
    moved = True
    while moved:
        moved = False
        for i in range(c):
            for call in events[i].message.tool_calls:
                answer = result_at.get(call.id)
                if answer is not None and answer >= c:
                    c = i
                    moved = True
                    break
            if moved:
                break
    return c


def combine_skips(*skips: SkipRecent | None) -> SkipRecent | None:
    """The largest skip of several (each protects its own tail)."""
    active = [s for s in skips if s is not None]
    if not active:
        return None
    if len(active) == 1:
        return active[0]

    def skip(events: Sequence[SessionEvent]) -> int:
        return max(s(events) for s in active)

    return skip


def select_events(
    events: Sequence[SessionEvent],
    skip_recent: SkipRecent | None = None,
    *,
    has_previous_summary: bool = False,
    formatter: ConversationFormatter = DEFAULT_FORMATTER,
) -> tuple[list[SessionEvent], int]:
    """The summarizable events a summary may cover, and how many were held back.

    Partial and ``skip_summarization`` events are dropped first. With a
    skip of ``n`` (0 < n < len) the head is kept only if it holds a user
    message with text, or, when a previous summary exists, at least one
    event with text (the chain continuing after the summary); otherwise
    nothing is selected.
    """
    usable = [e for e in events if is_summarizable(e)]
    n = skip_recent(usable) if skip_recent is not None else 0
    if n <= 0:
        return usable, 0
    if n >= len(usable):
        return [], len(usable)
    head = usable[:-n]
    if any(is_user_turn(e) and (e.message.content or "").strip() for e in head):
        return head, n
    if has_previous_summary and any(formatter.event_text(e) for e in head):
        return head, n
    return [], len(usable)
