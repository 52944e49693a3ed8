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


def outlived_by_deletion(created_at: datetime, cutoff_at: datetime, deleted_at: datetime | None) -> bool:
    """A summary (made at ``created_at``, its boundary at ``cutoff_at``) of a session deleted at
    ``deleted_at`` is stale: made by then, or summarizing events from before it (a job that was in
    flight at the deletion and answered after it would otherwise put the deleted history back)."""
    if deleted_at is None:
        return False
    return to_millis(created_at) <= to_millis(deleted_at) or to_millis(cutoff_at) <= to_millis(deleted_at)
