"""Held-back events: the recent tail a summary pass keeps out of its summary.

A pass keeps back the last ``keep_recent_rounds`` user turns of its delta (a
round starts at a user turn, ``eligibility.is_user_turn``) and at least the last
``skip_recent_events`` events (``streams.summarizer.selection``). Those events
stay after the new boundary: pending, visible to the agent, and summarized by a
later pass. Nothing here drops an event from the pending index.

They counted toward the trigger that fired the pass, so they do not count toward
the next one — the Python guide's rule, whose conversation counter is reset when
a summary is made, so the kept rounds are not counted twice. Without this, a
delta that still holds ``keep_recent_rounds`` rounds after every summary passes
the conversation threshold again on the next answer: one LLM call per round.

Both are read from the pending index alone (its user-turn flags and order), so
a decision stays a pure function of the state and the policy:

* after a summary, the held-back events are the head of the pending index — up
  to its ``keep_recent_rounds + 1``-th user turn, and at least its first
  ``skip_recent_events`` entries (:func:`held_back_prefix`). An answer to the
  last held-back round that arrived while the pass ran is counted with them;
* a pass now would hold back everything when the pending index has no entry
  before its last ``keep_recent_rounds`` user turns, or no more than
  ``skip_recent_events`` entries (:func:`all_held_back`): no job is emitted then
  (the summarizer would answer "no events to summarize").

The counters left after the held-back head are what every check sees, except
``max_text_len`` (the longest text of the delta), which is not recomputed: the
important-content check still sees the held-back text, as the guide's does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from streams.rules.counters import F_USER, Counters, PendingEvent


def held_back_prefix(pending: Sequence[PendingEvent], keep_rounds: int, skip_events: int) -> int:
    """How many leading entries of ``pending`` (the delta after a summary) that summary held back."""
    if keep_rounds <= 0 and skip_events <= 0:
        return 0
    end = 0
    if keep_rounds > 0:
        seen = 0
        end = len(pending)
        for i, entry in enumerate(pending):
            if entry.flags & F_USER:
                seen += 1
                if seen > keep_rounds:
                    end = i
                    break
    return min(len(pending), max(end, skip_events))


def all_held_back(pending: Sequence[PendingEvent], keep_rounds: int, skip_events: int) -> bool:
    """Whether a pass over ``pending`` now would keep every entry back (nothing to summarize)."""
    if skip_events > 0 and len(pending) <= skip_events:
        return True
    if keep_rounds <= 0:
        return False
    seen = 0
    for i in range(len(pending) - 1, -1, -1):
        if pending[i].flags & F_USER:
            seen += 1
            if seen == keep_rounds:
                return i == 0
    return True


def without_held_back(
    counters: Counters, held: Sequence[PendingEvent], counts: Callable[[PendingEvent], bool]
) -> Counters:
    """``counters`` less the ``held`` entries that count toward the scope (``counts``)."""
    if not held:
        return counters
    gone = Counters.of(p for p in held if counts(p))
    return Counters(
        max(0, counters.events - gone.events),
        max(0, counters.tokens - gone.tokens),
        max(0, counters.rounds - gone.rounds),
        counters.max_text_len,
        max(0, counters.keywords - gone.keywords),
    )
