"""Where a summary boundary falls among the stored events (pure).

Event positions are ``(ts, seq)``: the timestamp (Cassandra keeps
milliseconds) and the Kafka offset, which orders the events of one session
that share a timestamp. A boundary whose ``last_event_id`` resolves to a
stored event is exact: what follows that event is after the boundary. A
timestamp-only boundary (or one whose event is unknown) keeps the events at
the cutoff timestamp on both sides, the guide's rule: re-summarizing the last
covered event is preferred over losing a same-timestamp sibling.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime


def to_millis(dt: datetime) -> datetime:
    """``dt`` in UTC truncated to whole milliseconds (Cassandra ``timestamp`` precision)."""
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    dt = dt.astimezone(UTC)
    return dt.replace(microsecond=dt.microsecond // 1000 * 1000)


@dataclass(frozen=True)
class Cut:
    """A resolved boundary: the cutoff and, when the boundary event is known, its position."""

    cutoff_at: datetime
    anchor_ts: datetime | None = None
    anchor_seq: int | None = None

    @classmethod
    def of(cls, cutoff_at: datetime, anchor: tuple[datetime, int] | None = None) -> Cut:
        if anchor is None:
            return cls(to_millis(cutoff_at))
        return cls(to_millis(cutoff_at), to_millis(anchor[0]), anchor[1])

    @property
    def exact(self) -> bool:
        return self.anchor_ts is not None and self.anchor_seq is not None

    @property
    def scan_from(self) -> datetime:
        """The earliest timestamp an event after the boundary can have."""
        if self.exact:
            assert self.anchor_ts is not None
            return min(self.anchor_ts, self.cutoff_at)
        return self.cutoff_at

    def is_after(self, ts: datetime, seq: int) -> bool:
        """Whether an event at ``(ts, seq)`` is after the boundary (what the next prompt still needs)."""
        ts = to_millis(ts)
        if self.exact:
            assert self.anchor_ts is not None and self.anchor_seq is not None
            return (ts, seq) > (self.anchor_ts, self.anchor_seq)
        return ts >= self.cutoff_at

    def is_hidden(self, ts: datetime, seq: int) -> bool:
        """Whether an event at ``(ts, seq)`` is covered by the summary (up to and including the boundary)."""
        ts = to_millis(ts)
        if self.exact:
            assert self.anchor_ts is not None and self.anchor_seq is not None
            return (ts, seq) <= (self.anchor_ts, self.anchor_seq)
        return ts <= self.cutoff_at


@dataclass(frozen=True)
class Deletion:
    """A session's last ``delete_session``: its time and, when recorded, its events-topic position."""

    at: datetime
    offset: int | None = None
    """Offset of the command in the session's events partition (``None``: a marker of an older build)."""


def outlived_by_deletion(created_at: datetime, events_offset: int | None, deletion: Deletion | None) -> bool:
    """A summary of a deleted session is stale when it covers events before the deletion: its
    boundary event (``events_offset``, the same partition) precedes the command in the log. Without
    both offsets (a summary or a marker of an older build), when it was made by the deletion.

    A job in flight at the deletion may be answered long after it; its summary, made after the
    deletion, would otherwise put the deleted history back. Event timestamps do not decide this:
    they are the producer's, and a session imported with old timestamps may be deleted and started
    again.
    """
    if deletion is None:
        return False
    if events_offset is not None and deletion.offset is not None:
        return events_offset < deletion.offset  # the log decides; clocks only when it cannot
    return to_millis(created_at) <= to_millis(deletion.at)
