"""Late events: logged after an event of their session that is stamped later (pure).

A producer's clock behind, or a sub-agent flushing its events late, puts an
event in the log after events stamped later than it. The summarizer goes by
the log (``streams.rules.boundaries``): such an event, logged after a
summary's boundary event, is in the next pass. The read side scans a
session's events in timestamp order from the boundary's timestamp
(``projections.boundary.Cut.scan_from``), which a late event lies before, so
the projector also writes every late event to ``late_events`` (clustered by
``seq``, the log order), and the read adds those logged after the boundary
event. Every other event after the boundary is stamped at or after the
boundary event, so the scan finds it.

*Late* means: stamped (to the millisecond Cassandra keeps) before the latest
timestamp among the session's events written before it. The projector knows
that timestamp from :class:`LatestStamps`, its memory of the latest
timestamp per session; a session it does not remember costs one read of one
row (the session's newest event), once.

An event *published again* (the same event id and timestamp, a producer's
retry) stays where the log first had it: its rows keep the first record's
``seq`` and it is not late again. That is the summarizer's rule too (an
early record the log already held at the boundary was summarized), so a
summarized event sent again never comes back into the prompt. Such a record
is late, or stamped in the millisecond of the latest timestamp (nothing
stamped later was logged in between): both are looked up; a record stamped
later than the latest is new. A tie costs no read when :class:`LatestStamps`
knows every event id stamped in that millisecond (it saw the session reach it,
and they were at most ``tied_ids``) and the record's id is not among them:
producers whose clocks tick in seconds stamp most of a session's events in its
latest millisecond.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from projections.boundary import millis

DEFAULT_REMEMBERED_SESSIONS = 100_000
"""Sessions whose latest timestamp a projector process remembers (about 330 bytes each, plus the event ids
stamped in that millisecond; least recently projected forgotten first)."""
DEFAULT_TIED_IDS = 16
"""Event ids remembered per session in its latest millisecond; past them its ties are looked up again."""

Partition = tuple[str, int]
"""An events-topic partition ``(topic, partition)``."""
_Latest = tuple[int, int | None, tuple[Hashable, ...] | None]


@dataclass(frozen=True)
class Placement:
    """Where the projector writes one event record."""

    seq: int
    """The event's log position: the record's offset, or the first record's for an event published again."""
    late: bool = False
    """Stamped before an event logged before it: also written to ``late_events``."""


class LatestStamps:
    """The latest timestamp written per session of each events partition (bounded, least recent out).

    What it remembers is never *older* than what Cassandra holds for the
    session's events logged before the record being placed, or a late event
    would be taken for an ordinary one: it is remembered only while this
    process projects the partition's records one after the other. A jump in
    a partition's offsets (a restart seeking to the stored offset, the
    partition handed back after another projector advanced it) forgets the
    partition; its sessions are read again. Remembering a *newer* timestamp
    (a batch delivered again after a crash) only files ordinary events as
    late too, which the read takes just as well.
    """

    def __init__(self, capacity: int = DEFAULT_REMEMBERED_SESSIONS, tied_ids: int = DEFAULT_TIED_IDS) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        if tied_ids < 0:
            raise ValueError(f"tied_ids must be >= 0, got {tied_ids}")
        self.capacity = capacity
        self.tied_ids = tied_ids
        self._next: dict[Partition, int] = {}
        self._run: dict[Partition, int] = {}
        """Per partition, which unbroken run of its offsets is being projected (a jump starts the next)."""
        self._latest: OrderedDict[tuple[Partition, Hashable], _Latest] = OrderedDict()
        """``(partition, session)`` → (the run it was learnt in, its latest timestamp in ms (``None``: no
        event), the ids of the events stamped in that millisecond (``None``: not all known))."""

    def follow(self, partition: Partition, offset: int) -> None:
        """Record that ``offset`` of ``partition`` is projected now (every record of it, in order)."""
        if self._next.get(partition) != offset:
            self._run[partition] = self._run.get(partition, 0) + 1  # what was learnt before is stale
        self._next[partition] = offset + 1

    def knows(self, partition: Partition, session: Hashable) -> bool:
        """Whether the latest timestamp of ``session`` is remembered (``None`` counts: no event)."""
        found = self._latest.get((partition, session))
        return found is not None and found[0] == self._run.get(partition, 0)

    def learn(self, partition: Partition, session: Hashable, latest: datetime | None) -> None:
        """Remember ``latest`` (read from Cassandra; ``None``: the session has no event) for ``session``.

        Which events Cassandra holds in that millisecond is not known: its ties are looked up until
        the session's latest timestamp moves on.
        """
        if latest is None:
            self._set((partition, session), None, ())
        else:
            self._set((partition, session), millis(latest), None)

    def forget(self, partition: Partition, session: Hashable) -> None:
        """``session`` was deleted: it has no event (later events of it start afresh)."""
        self.learn(partition, session, None)

    def place(self, partition: Partition, session: Hashable, ts: datetime) -> bool:
        """Whether an event of ``session`` stamped ``ts`` is late; remembers ``ts`` when it is the latest.

        The session must be known (:meth:`knows`; else :meth:`learn` it first).
        """
        return self.order(partition, session, ts) < 0

    def order(self, partition: Partition, session: Hashable, ts: datetime, event_id: Hashable | None = None) -> int:
        """Where an event ``event_id`` stamped ``ts`` falls against the session's latest timestamp: -1
        before it (late), 0 in its millisecond when it may be a record published again (its id is among
        those stamped there, or they are not all known: the session was read cold from Cassandra, more
        than ``tied_ids`` of them, or no ``event_id`` given), 1 after it, the session's first, or a new
        event in its millisecond; remembers ``ts`` and ``event_id`` when it is the latest. The session
        must be known (as for :meth:`place`); one this memory dropped meanwhile (a batch holding more
        sessions than ``capacity``: learning the last ones dropped the first) is taken as late (-1): what
        it holds is unknown, and a record filed as late that is not (see the class) the read takes as well."""
        key = (partition, session)
        found = self._latest.get(key)
        if found is None:
            return -1
        _, latest, ids = found
        ms = millis(ts)
        if latest is not None and ms < latest:
            return -1
        if latest is None or ms > latest:
            self._set(key, ms, None if event_id is None or self.tied_ids == 0 else (event_id,))
            return 1
        if event_id is None:  # it may be new, and is not remembered: the millisecond's ids are not all known
            self._set(key, ms, None)
            return 0
        if ids is None or event_id in ids:
            return 0
        self._set(key, ms, (*ids, event_id) if len(ids) < self.tied_ids else None)
        return 1

    def _set(self, key: tuple[Partition, Hashable], ms: int | None, ids: tuple[Hashable, ...] | None) -> None:
        latest = self._latest
        latest[key] = (self._run.get(key[0], 0), ms, ids)
        latest.move_to_end(key)
        if len(latest) > self.capacity:
            latest.popitem(last=False)


def first_seq(ts: datetime, offset: int, first: tuple[datetime, int] | None) -> int | None:
    """The position of the record that first logged this event, when ``first`` (the ``(ts, seq)`` stored or
    seen for its event id) is an earlier record of it with the same timestamp; else ``None``."""
    if first is None or millis(first[0]) != millis(ts) or first[1] >= offset:
        return None
    return first[1]


def place_late(
    records: Sequence[tuple[Hashable, datetime, int]],
    late: Sequence[int],
    stored: Mapping[int, tuple[datetime, int]],
    ties: Sequence[int] = (),
) -> dict[int, Placement]:
    """Where the late ones among ``records``, and those published again, go, by index.

    ``records``: ``(event identity, stamp, offset)`` of a batch's events in log
    order; ``late``: the indices :meth:`LatestStamps.order` found late (-1);
    ``ties``: those it found in the latest timestamp's millisecond (0);
    ``stored``: by index of either, the stored ``(ts, seq)`` of its event id.
    A record of an event the log already had with the same stamp (stored, or
    earlier in the batch) is that event published again: it keeps the first
    record's place and is not late again. The other late ones are late at
    their own offset; the other ties, and every other record, are placed
    plainly (no entry).
    """
    if not late and not ties:
        return {}
    late_at, tie_at = set(late), set(ties)
    placed: dict[int, Placement] = {}
    first: dict[Hashable, tuple[datetime, int]] = {}
    for n in range(max(late_at | tie_at) + 1):
        ident, ts, offset = records[n]
        if n in late_at or n in tie_at:
            again = first_seq(ts, offset, stored.get(n) or first.get(ident))
            if again is not None:
                placed[n] = Placement(again)
            elif n in late_at:
                placed[n] = Placement(offset, late=True)
        first.setdefault(ident, (ts, placed[n].seq if n in placed else offset))
    return placed


__all__ = [
    "DEFAULT_REMEMBERED_SESSIONS", "DEFAULT_TIED_IDS", "LatestStamps", "Partition", "Placement", "first_seq",
    "place_late",
]  # fmt: skip
