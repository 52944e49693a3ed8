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
from collections import deque
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from schemas.settings import KafkaSettings
from streams.errors import PermanentError, RetryableError
from streams.kafka_config import consumer_kwargs


class RangePastLogEndError(PermanentError):
    """A read up to an offset the partition does not hold (the job's events are not on it)."""


@dataclass(frozen=True, slots=True)
class RawEvent:
    """One record of the session read back: its offset and bytes."""

    offset: int
    value: bytes


class RecentEvents:
    """The latest records the track agent consumed, per partition, within a byte budget.

    A job's delta was consumed by this worker's track agent a moment before, so it is
    usually still here: reading it back from Kafka (a scan of the whole offset range,
    every session's records) is then skipped. The records of a partition are kept
    contiguously from ``low`` to the last offset seen, so a range inside that window is
    answered completely, with the very bytes Kafka holds; anything else returns ``None``
    (read from Kafka). A partition starts over when it is revoked or assigned, or when
    an offset arrives out of order (re-delivery).
    """

    def __init__(self, max_bytes: int = 32 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self.hits = 0
        self._size = 0
        self._order: deque[tuple[int, int, bytes, int]] = deque()
        self._by_key: dict[tuple[int, bytes], deque[tuple[int, bytes]]] = {}
        self._low: dict[int, int] = {}
        self._high: dict[int, int] = {}

    def add(self, partition: int, offset: int, key: bytes | None, value: bytes | None) -> None:
        high = self._high.get(partition)
        if high is not None and offset <= high:
            self.reset({partition})
        self._low.setdefault(partition, offset)
        self._high[partition] = offset
        if key is None or value is None:
            return
        self._by_key.setdefault((partition, key), deque()).append((offset, value))
        size = len(key) + len(value) + 96
        self._order.append((partition, offset, key, size))
        self._size += size
        while self._size > self.max_bytes and self._order:
            p, o, k, n = self._order.popleft()
            self._size -= n
            entries = self._by_key.get((p, k))
            if entries and entries[0][0] == o:
                entries.popleft()
                if not entries:
                    del self._by_key[(p, k)]
            if p in self._low:
                self._low[p] = max(self._low[p], o + 1)

    def reset(self, partitions: set[int]) -> None:
        for p in partitions:
            self._low.pop(p, None)
            self._high.pop(p, None)
        for pk in [pk for pk in self._by_key if pk[0] in partitions]:
            del self._by_key[pk]

    def read(self, partition: int, start: int, end: int, key: bytes) -> list[RawEvent] | None:
        """The records of ``key`` at ``start..end``, or ``None`` when the window does not cover it."""
        low = self._low.get(partition)
        if low is None or start < low or end > self._high[partition]:
            return None
        self.hits += 1
        return [RawEvent(o, v) for o, v in self._by_key.get((partition, key), ()) if start <= o <= end]


class EventLogReader:
    """A small pool of unassigned consumers, one per concurrent read (after :class:`RecentEvents`)."""

    def __init__(
        self,
        kafka: KafkaSettings,
        topic: str,
        size: int = 4,
        stall_timeout_s: float = 30.0,
        fetch_wait_ms: int = 10,
        past_end_grace_s: float = 2.0,
    ) -> None:
        self.kafka = kafka
        self.topic = topic
        self.size = size
        self.stall_timeout_s = stall_timeout_s
        self.past_end_grace_s = past_end_grace_s
        """How long a range may reach past the log end before the read fails (a new leader's
        high watermark can lag its predecessor's for a moment)."""
        self.fetch_wait_ms = fetch_wait_ms
        self._idle: asyncio.Queue[AIOKafkaConsumer] = asyncio.Queue()
        self._all: list[AIOKafkaConsumer] = []
        self._create_lock = asyncio.Lock()
        self.records_scanned = 0
        self.recent = RecentEvents()

    async def stop(self) -> None:
        for consumer in self._all:
            await consumer.stop()
        self._all.clear()

    async def _acquire(self) -> AIOKafkaConsumer:
        if self._idle.empty() and len(self._all) < self.size:
            async with self._create_lock:
                if len(self._all) < self.size:
                    consumer = AIOKafkaConsumer(
                        **consumer_kwargs(self.kafka), enable_auto_commit=False, group_id=None,
                        auto_offset_reset="earliest", fetch_max_wait_ms=self.fetch_wait_ms,
                    )  # fmt: skip
                    await consumer.start()
                    self._all.append(consumer)
                    return consumer
        return await self._idle.get()

    async def read(self, partition: int, start: int, end: int, key: bytes) -> list[RawEvent]:
        """Records with ``key`` at offsets ``start..end`` (inclusive) of ``partition``."""
        if end < start:
            return []
        found = self.recent.read(partition, start, end, key)
        if found is not None:
            return found
        consumer = await self._acquire()
        tp = TopicPartition(self.topic, partition)
        try:
            return await self._scan(consumer, tp, start, end, key)
        except KafkaError as exc:
            raise RetryableError(f"reading {self.topic}[{partition}] {start}..{end}: {exc}") from exc
        finally:
            # An idle consumer left fetching at the log end long-polls the broker; its in-flight
            # fetch would delay the next read's first fetch (one request per node at a time).
            if tp in consumer.assignment():
                consumer.pause(tp)
            self._idle.put_nowait(consumer)

    async def _scan(
        self, consumer: AIOKafkaConsumer, tp: TopicPartition, start: int, end: int, key: bytes
    ) -> list[RawEvent]:
        if tp in consumer.assignment():
            consumer.resume(tp)
        else:
            consumer.assign([tp])
        consumer.seek(tp, start)
        found: list[RawEvent] = []
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
                if msg.key == key and msg.value is not None:
                    found.append(RawEvent(msg.offset, msg.value))
            if await consumer.position(tp) > end:
                return found
            if time.monotonic() - last_progress > self.stall_timeout_s:
                raise RetryableError(f"no progress reading {tp.topic}[{tp.partition}] up to offset {end}")
