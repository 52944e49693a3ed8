"""Reading a key's delta events straight from the events topic.

The summarize agent gets event content from Kafka, the source of truth, not
from Cassandra (the projector may lag) nor from the table (which holds no
content). A job names the range: from the offset after the previous
summary's last event (or the session's first event) to the job's ``upto``
offset, on the job's own partition (all topics are co-partitioned). Only
records whose key is the session's record key (the job's ``events_key``, any
layout) are returned; the caller checks their session ids. Replay reads
exactly the same bytes, so the same job always sees the same delta.

A range reaching past the partition's end cannot be a session's own: it fails
at once (:class:`RangePastLogEndError`, permanent) instead of waiting for
offsets that may never come while the partition's later jobs queue behind it.
"""

from __future__ import annotations

import asyncio
import time
from array import array
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field, fields
from itertools import islice
from operator import itemgetter
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from schemas import SessionEvent
from schemas.settings import KafkaSettings
from streams.clients.kafka_config import consumer_kwargs
from streams.errors import PermanentError, RetryableError


class RangePastLogEndError(PermanentError):
    """A read up to an offset the partition does not hold (the job's events are not on it)."""


RECENT_BYTES = 128 * 1024 * 1024
"""The record buffer's budget unless told (the worker passes ``worker.recent_events_mb``)."""

DECODED_SHARE = 4
"""The decoded events the buffer keeps take at most ``1 / DECODED_SHARE`` of its budget (the newest records'):
the rest keeps the raw window wide, which a job falls back to (a decode) past them."""


@dataclass(frozen=True, slots=True)
class RawEvent:
    """One record of the session read back: its offset and bytes.

    ``event``: the session event the track agent decoded from ``value`` (its decode, under the same
    record limit as the summarize side's), still held by :class:`RecentEvents`; ``None``: not held
    (a record re-read from Kafka, a command, a refused record), ``value`` is decoded again. Shared
    by every job reading the record: events are frozen models, and nothing changes their content.
    """

    offset: int
    value: bytes
    event: SessionEvent | None = None


_offset_of = itemgetter(0)
_new_object = object.__new__
_SET_OFFSET, _SET_VALUE, _SET_EVENT = (RawEvent.__dict__[f.name].__set__ for f in fields(RawEvent))


def raw_event(offset: int, value: bytes, event: SessionEvent | None = None) -> RawEvent:
    """``RawEvent(offset, value, event)``, its slots set directly (one per record read): the frozen dataclass's
    ``__init__`` sets each through ``object.__setattr__``, in about twice the time."""
    out: RawEvent = _new_object(RawEvent)
    _SET_OFFSET(out, offset)
    _SET_VALUE(out, value)
    _SET_EVENT(out, event)
    return out


DECODED_BASE_BYTES = 2560
DECODED_CALL_BYTES = 1536


def decoded_size(event: SessionEvent, value: bytes) -> int:
    """What holding ``event`` (decoded from ``value``) costs, in bytes: an upper estimate.

    Measured with ``tracemalloc`` over decoded events (pydantic models, their dicts and
    strings, the datetime): ~2.0-2.3 KiB per event plus its text (plain messages, results of 4 KB,
    producer extras), ~1.5 KiB more per tool call. Counted twice over the text: the JSON a job
    serializes of the event is kept with it (``streams.summarizer.event_json``).
    """
    return DECODED_BASE_BYTES + 2 * len(value) + DECODED_CALL_BYTES * len(event.message.tool_calls)


@dataclass
class Located:
    """Where a key's records of ``start..end`` are (see :meth:`RecentEvents.locate`).

    In offset order: a stretch to scan (``scan_end`` is not ``None``: ``start..scan_end``
    was consumed before the index began), then ``fetch`` (offsets of the key's records,
    values no longer held), then ``cached`` (records still held).
    """

    scan_end: int | None
    fetch: list[int] = field(default_factory=list)
    cached: list[RawEvent] = field(default_factory=list)


class RecentEvents:
    """The latest records the track agent consumed, and where each key's records are.

    A job's delta was consumed by this worker's track agent a moment before, so it is
    usually still here: reading it back from Kafka (a scan of the whole offset range,
    every session's records) is then skipped. The records of a partition are kept
    contiguously from ``low`` to the last offset seen, within ``max_bytes``, so a range
    inside that window is answered completely, with the very bytes Kafka holds. With the
    newest records it keeps the session events the track agent decoded from them (at most
    ``max_bytes / DECODED_SHARE`` of the budget, counted by :func:`decoded_size`): a job
    takes them instead of decoding its delta again.

    Past the byte budget, the offsets of each key's records are still known (an index
    of ``max_offsets`` entries, 8 bytes each, complete from its own ``low`` per
    partition): :meth:`locate` then names the offsets to fetch, so a job reads its own
    records and not every session's records interleaved with them. A partition starts
    over when it is revoked or assigned, or when an offset arrives out of order
    (re-delivery).
    """

    def __init__(self, max_bytes: int = RECENT_BYTES, max_offsets: int = 2_000_000) -> None:
        self.max_bytes = max_bytes
        self.max_decoded = max_bytes // DECODED_SHARE
        self.max_offsets = max_offsets
        self.hits = 0
        self._size = 0
        self._decoded_size = 0
        self._order: deque[tuple[int, int, bytes, int]] = deque()
        # Entries are ``[offset, value, event or None, the event's decoded_size]``: a decoded event is
        # let go (``None``) before its record's bytes are.
        self._by_key: dict[tuple[int, bytes], deque[list[Any]]] = {}
        self._decoded: deque[list[Any]] = deque()
        self._low: dict[int, int] = {}
        self._high: dict[int, int] = {}
        self._offsets: dict[tuple[int, bytes], array[int]] = {}
        self._index_low: dict[int, int] = {}
        self._indexed = 0

    def add(
        self, partition: int, offset: int, key: bytes | None, value: bytes | None, event: SessionEvent | None = None
    ) -> None:
        """Take the record at ``offset``; ``event``: the session event the track agent decoded from it
        (handed to the jobs reading the record instead of a decode of their own)."""
        high = self._high.get(partition)
        if high is not None and offset <= high:
            self.reset({partition})
        self._low.setdefault(partition, offset)
        self._index_low.setdefault(partition, offset)
        self._high[partition] = offset
        if key is None or value is None:
            return
        pk = (partition, key)
        offsets = self._offsets.get(pk)
        if offsets is None:
            offsets = self._offsets[pk] = array("q")
        offsets.append(offset)
        self._indexed += 1
        if self._indexed > self.max_offsets:
            self._trim_index()
        entry = [offset, value, None, 0]
        self._by_key.setdefault(pk, deque()).append(entry)
        size = len(key) + len(value) + 96
        if event is not None:
            held = decoded_size(event, value)
            if held <= self.max_decoded:
                entry[2], entry[3] = event, held
                self._decoded.append(entry)
                self._decoded_size += held
                decoded = self._decoded
                while self._decoded_size > self.max_decoded:
                    self._forget(decoded.popleft())
        self._order.append((partition, offset, key, size))
        self._size += size
        # The budget holds the raw records and the decoded events together.
        while self._size + self._decoded_size > self.max_bytes and self._order:
            p, o, k, n = self._order.popleft()
            self._size -= n
            entries = self._by_key.get((p, k))
            if entries and entries[0][0] == o:
                self._drop(entries.popleft())
                if not entries:
                    del self._by_key[(p, k)]
            if p in self._low:
                self._low[p] = max(self._low[p], o + 1)

    def _forget(self, entry: list[Any]) -> None:
        """Let go of ``entry``'s decoded event (its bytes stay; a reader decodes them)."""
        held = entry[3]
        if held:
            entry[2], entry[3] = None, 0
            self._decoded_size -= held

    def _drop(self, entry: list[Any]) -> None:
        """``entry`` left the buffer: nothing of it stays held (the queue of decoded events may still name it)."""
        if entry[3]:
            self._forget(entry)
            decoded = self._decoded
            while decoded and not decoded[0][3]:
                decoded.popleft()
        entry[1] = b""

    def reset(self, partitions: set[int]) -> None:
        for p in partitions:
            self._low.pop(p, None)
            self._high.pop(p, None)
            self._index_low.pop(p, None)
        for pk in [pk for pk in self._by_key if pk[0] in partitions]:
            for entry in self._by_key.pop(pk):
                self._drop(entry)
        for pk in [pk for pk in self._offsets if pk[0] in partitions]:
            self._indexed -= len(self._offsets.pop(pk))

    def _trim_index(self) -> None:
        """Forget the older half of every partition's index (amortized: once per ``max_offsets / 2`` adds)."""
        cut = {p: low + (self._high[p] - low) // 2 + 1 for p, low in self._index_low.items()}
        self._index_low.update(cut)
        for pk in list(self._offsets):
            offsets = self._offsets[pk]
            drop = bisect_left(offsets, cut[pk[0]])
            if drop == len(offsets):
                del self._offsets[pk]
            elif drop:
                del offsets[:drop]
        self._indexed = sum(len(o) for o in self._offsets.values())

    def locate(self, partition: int, start: int, end: int, key: bytes) -> Located | None:
        """Where ``key``'s records at ``start..end`` are, or ``None`` when nothing is known (scan it all)."""
        index_low = self._index_low.get(partition)
        if index_low is None or end > self._high[partition] or end < index_low:
            return None
        located = Located(scan_end=index_low - 1 if start < index_low else None)
        offsets = self._offsets.get((partition, key))
        if offsets is None:
            return located
        held = self._low[partition]
        first = bisect_left(offsets, max(start, index_low))
        last = bisect_right(offsets, end)
        split = bisect_left(offsets, held, first, last)
        located.fetch = offsets[first:split].tolist()
        if split < last:
            low, high = offsets[split], offsets[last - 1]
            located.cached = [
                raw_event(o, v, e) for o, v, e, _ in self._by_key.get((partition, key), ()) if low <= o <= high
            ]
        return located

    def read(self, partition: int, start: int, end: int, key: bytes) -> list[RawEvent] | None:
        """The records of ``key`` at ``start..end``, or ``None`` when the window does not cover it."""
        low = self._low.get(partition)
        if low is None or start < low or end > self._high[partition]:
            return None
        self.hits += 1
        entries = self._by_key.get((partition, key))
        if not entries:
            return []
        # In offset order: from the first at ``start`` on, not a look at every record of the key held.
        found = []
        for o, v, e, _ in islice(entries, bisect_left(entries, start, key=_offset_of), None):
            if o > end:
                break
            found.append(raw_event(o, v, e))
        return found


FETCH_BYTES = 64 * 1024
"""``max_partition_fetch_bytes`` of the consumers fetching a key's offsets one by one."""
READ_ON_AT_MOST = 500
"""Records a read by offsets goes through to reach its next offset rather than seeking to it (a seek drops
what the last fetch holds: a fetch round trip for each record or two of a session interleaved with a few
dozen others)."""


_T = TypeVar("_T")


class _Pool:
    """Unassigned consumers of one configuration, one per concurrent read (at most ``reader.size``)."""

    def __init__(self, reader: EventLogReader, overrides: dict[str, Any]) -> None:
        self.reader = reader
        self.overrides = overrides
        self._idle: asyncio.Queue[AIOKafkaConsumer] = asyncio.Queue()
        self._all: list[AIOKafkaConsumer] = []
        self._create_lock = asyncio.Lock()

    async def stop(self) -> None:
        for consumer in self._all:
            await consumer.stop()
        self._all.clear()

    async def _acquire(self) -> AIOKafkaConsumer:
        r = self.reader
        if self._idle.empty() and len(self._all) < r.size:
            async with self._create_lock:
                if len(self._all) < r.size:
                    kwargs = {**consumer_kwargs(r.kafka), **self.overrides}
                    consumer = AIOKafkaConsumer(
                        **kwargs, enable_auto_commit=False, group_id=None,
                        auto_offset_reset="earliest", fetch_max_wait_ms=r.fetch_wait_ms,
                    )  # fmt: skip
                    await consumer.start()
                    self._all.append(consumer)
                    return consumer
        return await self._idle.get()

    async def run(self, tp: TopicPartition, read: Callable[[AIOKafkaConsumer], Awaitable[_T]]) -> _T:
        consumer = await self._acquire()
        try:
            return await read(consumer)
        finally:
            # An idle consumer left fetching at the log end long-polls the broker; its in-flight
            # fetch would delay the next read's first fetch (one request per node at a time).
            if tp in consumer.assignment():
                consumer.pause(tp)
            self._idle.put_nowait(consumer)


class EventLogReader:
    """Reads after :class:`RecentEvents`: small pools of unassigned consumers, one per concurrent read."""

    def __init__(
        self,
        kafka: KafkaSettings,
        topic: str,
        size: int = 4,
        stall_timeout_s: float = 30.0,
        fetch_wait_ms: int = 10,
        past_end_grace_s: float = 2.0,
        recent_bytes: int = RECENT_BYTES,
    ) -> None:
        self.kafka = kafka
        self.topic = topic
        self.size = size
        self.stall_timeout_s = stall_timeout_s
        self.past_end_grace_s = past_end_grace_s
        """How long a range may reach past the log end before the read fails (a new leader's
        high watermark can lag its predecessor's for a moment)."""
        self.fetch_wait_ms = fetch_wait_ms
        self._scanners = _Pool(self, {})
        # Fetching single offsets: a fetch returns whole record batches up to this many bytes
        # per partition (at least one batch, so larger records still come), not megabytes of
        # other sessions' records decoded for nothing.
        self._fetchers = _Pool(self, {"max_partition_fetch_bytes": FETCH_BYTES})
        self.records_scanned = 0
        self.recent = RecentEvents(max_bytes=recent_bytes)

    async def stop(self) -> None:
        await self._scanners.stop()
        await self._fetchers.stop()

    async def read(self, partition: int, start: int, end: int, key: bytes) -> list[RawEvent]:
        """Records with ``key`` at offsets ``start..end`` (inclusive) of ``partition``."""
        if end < start:
            return []
        found = self.recent.read(partition, start, end, key)
        if found is not None:
            return found
        located = self.recent.locate(partition, start, end, key)
        tp = TopicPartition(self.topic, partition)
        try:
            if located is None:
                return await self._scanners.run(tp, lambda c: self._scan(c, tp, start, end, key))
            found = []
            if located.scan_end is not None:
                scan_end = located.scan_end
                found = await self._scanners.run(tp, lambda c: self._scan(c, tp, start, scan_end, key))
            if located.fetch:
                offsets = located.fetch
                found.extend(await self._fetchers.run(tp, lambda c: self._fetch(c, tp, offsets, key)))
            found.extend(located.cached)
            return found
        except KafkaError as exc:
            raise RetryableError(f"reading {self.topic}[{partition}] {start}..{end}: {exc}") from exc

    async def read_keys(self, partition: int, ranges: Sequence[tuple[int, int, bytes]]) -> list[list[RawEvent]]:
        """For each ``(start, end, key)`` of ``partition``, its records as :meth:`read` returns them: those the
        buffer holds from it, the others by one scan of the partition from the lowest start to the highest end
        (a worker learning many sessions after a restart reads each stretch of the log once, not once per
        session)."""
        out = [self.recent.read(partition, start, end, key) if start <= end else [] for start, end, key in ranges]
        todo = [i for i, found in enumerate(out) if found is None]
        if not todo:
            return [found or [] for found in out]
        low = min(ranges[i][0] for i in todo)
        high = max(ranges[i][1] for i in todo)
        keys = {ranges[i][2] for i in todo}
        tp = TopicPartition(self.topic, partition)
        try:
            by_key = await self._scanners.run(tp, lambda c: self._scan_keys(c, tp, low, high, keys))
        except KafkaError as exc:
            raise RetryableError(f"reading {self.topic}[{partition}] {low}..{high}: {exc}") from exc
        for i in todo:
            start, end, key = ranges[i]
            out[i] = [r for r in by_key.get(key, ()) if start <= r.offset <= end]
        return [found or [] for found in out]

    async def _fetch(
        self, consumer: AIOKafkaConsumer, tp: TopicPartition, offsets: list[int], key: bytes
    ) -> list[RawEvent]:
        """The records of ``key`` at ``offsets`` (ascending): a seek to each one not yet read, unless it
        lies at most :data:`READ_ON_AT_MOST` records ahead (read on to it).

        Each fetch returns the record batch holding the offset and what follows it, so
        neighbouring offsets come with one round trip; the cost per job follows its own
        records, not the length of the stretch they are spread over.
        """
        self._assign(consumer, tp)
        found: list[RawEvent] = []
        i = 0
        position = -1  # the offset the consumer returns next without a seek (-1: none yet)
        while i < len(offsets):
            wanted = offsets[i]
            if position < 0 or not 0 <= wanted - position <= READ_ON_AT_MOST:
                consumer.seek(tp, wanted)
                position = wanted
            last_progress = time.monotonic()
            reached = -1
            # As many records as reach the next wanted offset (a fetch holds whole record batches:
            # the records past it are left unread, not turned into Python objects).
            upto = offsets[i + 1] if i + 1 < len(offsets) else wanted
            gap = upto - position + 1
            want_records = gap if upto - wanted <= 500 else wanted - position + 1
            while reached < wanted:
                batch = await consumer.getmany(tp, timeout_ms=500, max_records=want_records)
                messages = batch.get(tp, [])
                if not messages:
                    if time.monotonic() - last_progress > self.stall_timeout_s:
                        raise RetryableError(f"no progress reading {tp.topic}[{tp.partition}] at offset {wanted}")
                    continue
                last_progress = time.monotonic()
                for msg in messages:
                    self.records_scanned += 1
                    reached = msg.offset
                    position = msg.offset + 1
                    while i < len(offsets) and offsets[i] < msg.offset:
                        i += 1  # not a record of the log (a compacted-away or control offset)
                    if i < len(offsets) and offsets[i] == msg.offset:
                        i += 1
                        if msg.key == key and msg.value is not None:
                            found.append(RawEvent(msg.offset, msg.value))
                    if i == len(offsets):
                        return found
        return found

    @staticmethod
    def _assign(consumer: AIOKafkaConsumer, tp: TopicPartition) -> None:
        if tp in consumer.assignment():
            consumer.resume(tp)
        else:
            consumer.assign([tp])

    async def _scan(
        self, consumer: AIOKafkaConsumer, tp: TopicPartition, start: int, end: int, key: bytes
    ) -> list[RawEvent]:
        return (await self._scan_keys(consumer, tp, start, end, {key})).get(key, [])

    async def _scan_keys(
        self, consumer: AIOKafkaConsumer, tp: TopicPartition, start: int, end: int, keys: Collection[bytes]
    ) -> dict[bytes, list[RawEvent]]:
        """The records of ``keys`` at ``start..end`` of ``tp``, by key, in log order."""
        self._assign(consumer, tp)
        consumer.seek(tp, start)
        found: dict[bytes, list[RawEvent]] = {}
        last_progress = time.monotonic()
        past_end_since: float | None = None
        while True:
            batch = await consumer.getmany(tp, timeout_ms=500, max_records=5000)
            messages = batch.get(tp, [])
            if messages:
                last_progress = time.monotonic()
            else:
                log_end = (await consumer.end_offsets([tp]))[tp]
                if end < log_end:
                    past_end_since = None
                else:
                    if past_end_since is None:
                        past_end_since = time.monotonic()
                    if time.monotonic() - past_end_since >= self.past_end_grace_s:
                        raise RangePastLogEndError(
                            f"{tp.topic}[{tp.partition}] ends at offset {log_end}, the read asks for "
                            f"{start}..{end}: these offsets are not the job's session's (its records are "
                            "not all on this partition)"
                        )
            for msg in messages:
                if msg.offset > end:
                    return found
                self.records_scanned += 1
                if msg.key in keys and msg.value is not None:
                    found.setdefault(msg.key, []).append(RawEvent(msg.offset, msg.value))
            if await consumer.position(tp) > end:
                return found
            if time.monotonic() - last_progress > self.stall_timeout_s:
                raise RetryableError(f"no progress reading {tp.topic}[{tp.partition}] up to offset {end}")
