"""Where a summary boundary falls among the stored events (pure).

Event positions are ``(ts, seq)``: the timestamp (Cassandra keeps
milliseconds) and the Kafka offset. Every record of a session shares one
partition of the events topic, so ``seq`` is the session's log order: the
order the summarizer reads the events in (``streams.rules.boundaries``). A
boundary whose ``last_event_id`` resolves to a stored event is exact, and
the log decides: what was logged after that event is after the boundary,
whatever its timestamp (a producer's clock behind, a sub-agent flushing
late), and what was logged before it is covered. A timestamp-only boundary
(or one whose event is unknown) keeps the events at the cutoff timestamp on
both sides, the guide's rule: re-summarizing the last covered event is
preferred over losing a same-timestamp sibling; there a late event stamped
before the cutoff stays hidden until a summary with a known boundary event
holds it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


def millis(dt: datetime) -> int:
    """Whole milliseconds since the epoch (Cassandra's precision; naive values are UTC, as the driver's)."""
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return (dt - _EPOCH) // _MS


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
        """The earliest timestamp an event after the boundary can have, unless it is late.

        An event stamped earlier than an event logged before it is *late*
        (``projections.late_events``); every other event after an exact
        boundary is stamped at or after the boundary event. A scan of the
        clustering order from here finds the non-late ones; the late ones are
        in ``late_events`` (clustered by ``seq``).
        """
        if self.exact:
            assert self.anchor_ts is not None
            return min(self.anchor_ts, self.cutoff_at)
        return self.cutoff_at

    def is_after(self, ts: datetime, seq: int) -> bool:
        """Whether an event at ``(ts, seq)`` is after the boundary (what the next prompt still needs).

        Exact: logged after the boundary event. Else: stamped at or after the cutoff.
        """
        if self.anchor_seq is not None and self.anchor_ts is not None:
            return seq > self.anchor_seq
        return to_millis(ts) >= self.cutoff_at

    def is_hidden(self, ts: datetime, seq: int) -> bool:
        """Whether an event at ``(ts, seq)`` is covered by the summary (up to and including the boundary).

        Exact: logged at or before the boundary event. Else: stamped at or before the cutoff.
        """
        if self.anchor_seq is not None and self.anchor_ts is not None:
            return seq <= self.anchor_seq
        return to_millis(ts) <= self.cutoff_at


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
