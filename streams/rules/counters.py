"""What the trigger state remembers about one scope: delta counters and activity.

``PendingEvent`` is one entry of the pending-event index (no content). ``Counters``
are a pure function of the pending entries that count toward the scope, so they
can always be recomputed after a boundary moves. ``Activity`` follows the scope's
timeline across boundaries (last event, current top-level request and the idle
gap before it, open tool calls, model in use) and is never recomputed.

``Counters`` and ``Activity`` are small mutable records: the fold updates them in
place (one event touches several scopes, and rebuilding them per event was the
main cost of the trigger engine). Use :meth:`Counters.copy` /
:meth:`Activity.copy` to keep a snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

F_USER = 1
"""The event is a user message (a conversation round)."""
F_CONTENT = 2
"""The event has summarizable text."""
F_KEYWORD = 4
"""The event's text contains one of the policy's important keywords."""


class PendingEvent(NamedTuple):
    """One event after the boundary: ids, timestamp, tokens, key, flags — never content."""

    event_id: str
    ts: int
    """Microseconds since the epoch (UTC)."""
    tokens: int
    filter_key: str
    flags: int
    text_len: int
    """Longest stripped text part (content or reasoning), for the important-content check."""


@dataclass(slots=True)
class Counters:
    """Counts over the events of the delta that count toward a scope (mutable)."""

    events: int = 0
    tokens: int = 0
    rounds: int = 0
    max_text_len: int = 0
    keywords: int = 0
    """Events whose text contains an important keyword (``F_KEYWORD``)."""

    def add(self, entry: PendingEvent) -> Counters:
        """A new ``Counters`` with ``entry`` added (``self`` is unchanged)."""
        out = self.copy()
        out.add_in_place(entry)
        return out

    def add_in_place(self, entry: PendingEvent) -> None:
        self.events += 1
        self.tokens += entry.tokens
        self.rounds += entry.flags & F_USER
        if entry.text_len > self.max_text_len:
            self.max_text_len = entry.text_len
        if entry.flags & F_KEYWORD:
            self.keywords += 1

    def copy(self) -> Counters:
        return Counters(self.events, self.tokens, self.rounds, self.max_text_len, self.keywords)

    @classmethod
    def of(cls, entries: Iterable[PendingEvent]) -> Counters:
        """Recompute from scratch."""
        events = tokens = rounds = longest = keywords = 0
        for entry in entries:
            events += 1
            tokens += entry.tokens
            rounds += entry.flags & F_USER
            if entry.text_len > longest:
                longest = entry.text_len
            if entry.flags & F_KEYWORD:
                keywords += 1
        return cls(events, tokens, rounds, longest, keywords)


@dataclass(slots=True)
class Activity:
    """The scope's timeline, independent of the boundary (mutable).

    ``gap`` is the idle time (µs) between the previous event of the scope and the
    first event of the current top-level request; ``None`` when unavailable (no
    previous event, no request id, non-positive gap) or already consumed by a
    summary whose cutoff reaches the request start (a gap fires once).
    """

    last_ts: int | None = None
    last_request_id: str = ""
    request_id: str = ""
    request_started: int | None = None
    gap: int | None = None
    open_calls: tuple[str, ...] = ()
    model: str | None = None
    context_window: int | None = None

    def copy(self) -> Activity:
        return Activity(
            self.last_ts,
            self.last_request_id,
            self.request_id,
            self.request_started,
            self.gap,
            self.open_calls,
            self.model,
            self.context_window,
        )

    def consume_gap(self, cutoff: int) -> Activity:
        """A copy whose gap is dropped if ``cutoff`` reaches the current request's start."""
        out = self.copy()
        if out.gap is not None and out.request_started is not None and cutoff >= out.request_started:
            out.gap = None
        return out
