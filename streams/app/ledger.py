"""The summary ledger: the latest summary of every key, read back from the summaries topic.

The summaries topic is the source of truth for versions. Before the first job
of a partition after an assignment, the ledger reads that partition of the
summaries topic to its end (``ready``); afterwards this worker is the only
writer of the partition (jobs, events and summaries are co-partitioned and
assigned together), so it keeps the heads current by recording its own
writes. A revoked partition keeps its heads and the offset they were read up
to: when it comes back, only the records written since are read (heads only
ever move to higher versions, so re-reading our own writes is harmless).
A job whose ``from_version`` is below the head is stale: that is what makes
re-emitted and duplicate jobs harmless, across crashes and rebalances.

Heads are those of the epoch each session is served from (:mod:`streams.app.heads`):
an ``epoch_adopted`` record on the partition switches a session's heads to the
adopted epoch's, and summaries of the line it left no longer count.

It also keeps, per key, the last given-up failure published since the key's
latest summary and its session's last switch (:meth:`SummaryLedger.failure`): a
request that waited for that job (a ``join`` job) is answered with it. Records
are folded in log order, on catch-up as when this worker writes them, so the two
agree.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from schemas import EpochAdopted, SessionSummary, SummaryFailure
from schemas.settings import KafkaSettings
from streams.app.cache import SummaryCache
from streams.app.decoding import decode_summary_record
from streams.app.headers import EVENTS_OFFSET, INPUT_HASH, header, header_int
from streams.app.heads import Head, HeadBook, head_of
from streams.app.slow_wait import warn_if_slow
from streams.app.tracked import table_key
from streams.clients.kafka_config import consumer_kwargs
from streams.errors import RetryableError

log = logging.getLogger(__name__)


def summary_key(summary: SessionSummary) -> str:
    return table_key(summary.app_name, summary.user_id, summary.session_id, summary.filter_key)


class SummaryLedger:
    """Heads per partition; see the module docstring."""

    def __init__(
        self, kafka: KafkaSettings, topic: str, cache: SummaryCache | None = None, *, default_epoch: int = 0
    ) -> None:
        self.kafka = kafka
        self.topic = topic
        self.cache = cache
        self.book = HeadBook(default_epoch)
        """Heads on each session's served epoch, and the keys' failures (see :mod:`streams.app.heads`)."""
        self._read_upto: dict[int, int] = {}
        """Per partition: the offset the heads were read up to (the next catch-up starts there)."""
        self._ready: set[int] = set()
        self._lock = asyncio.Lock()
        self._consumer: AIOKafkaConsumer | None = None

    async def start(self) -> None:
        if self._consumer is None:
            self._consumer = AIOKafkaConsumer(
                **consumer_kwargs(self.kafka), enable_auto_commit=False, group_id=None, auto_offset_reset="earliest",
                fetch_max_wait_ms=10,
            )  # fmt: skip
            await self._consumer.start()

    async def stop(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None

    def forget(self, partitions: set[int]) -> None:
        """Partitions revoked: if they come back, the records written meanwhile are read first."""
        for p in partitions:
            self._ready.discard(p)

    def head(self, partition: int, key: str) -> Head | None:
        return self.book.head(partition, key)

    def epoch_of(self, partition: int, session: str) -> int:
        return self.book.epoch_of(partition, session)

    def failure(self, partition: int, key: str) -> SummaryFailure | None:
        """The key's last given-up failure, unless a summary of the key or a switch of its session came after it."""
        return self.book.failure(partition, key)

    def record(self, partition: int, summary: SessionSummary, events_offset: int | None, at: int | None = None) -> None:
        """Apply a summary (ours or read back at ``at``): only its session's served epoch, versions only grow."""
        self.book.record(partition, summary, events_offset, at)

    def record_failure(self, partition: int, failure: SummaryFailure, at: int | None = None) -> None:
        """Apply a failure record (ours or read back at ``at``): a given-up job is the key's latest news."""
        self.book.record_failure(partition, failure, at)

    def adopt(self, partition: int, record: EpochAdopted, at: int | None) -> None:
        """Apply an epoch switch (ours, or read back at ``at``)."""
        self.book.adopt(partition, record, at)

    async def ready(self, partition: int) -> None:
        """Read ``partition`` of the summaries topic to its end (once per assignment)."""
        if partition in self._ready:
            return
        async with self._lock:
            if partition in self._ready:
                return
            try:
                with warn_if_slow("summary ledger catching up", {"topic": self.topic, "partition": partition}):
                    count = await self._catch_up(partition)
            except KafkaError as exc:
                raise RetryableError(f"reading {self.topic}[{partition}]: {exc}") from exc
            self._ready.add(partition)
            log.info(
                "summary ledger ready",
                extra={"topic": self.topic, "partition": partition, "records": count,
                       "keys": self.book.keys(partition)},
            )  # fmt: skip

    async def _catch_up(self, partition: int) -> int:
        await self.start()
        consumer = self._consumer
        assert consumer is not None
        tp = TopicPartition(self.topic, partition)
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        start = self._read_upto.get(partition)
        if start is None:
            await consumer.seek_to_beginning(tp)
        else:
            consumer.seek(tp, start)
        count = 0
        try:
            while await consumer.position(tp) < end:
                batch = await consumer.getmany(tp, timeout_ms=1000, max_records=2000)
                for msg in batch.get(tp, []):
                    count += 1
                    self.absorb(partition, msg.value, msg.headers, msg.offset)
            self._read_upto[partition] = max(end, await consumer.position(tp))
        finally:
            consumer.pause(tp)  # no long-polling at the log end between catch-ups
        return count

    def absorb(
        self, partition: int, value: bytes | None, headers: list[tuple[str, bytes]] | None, offset: int | None = None
    ) -> None:
        """Apply one record of the summaries topic as read back at ``offset`` (catch-up reads them in log order).

        Every kind of record: a summary, a failure, a switch; a reply names a summary
        already applied and changes nothing.
        """
        if value is None:
            return
        try:
            record = decode_summary_record(value)
        except ValueError:
            return
        if isinstance(record, EpochAdopted):
            self.adopt(partition, record, offset)
            return
        if isinstance(record, SummaryFailure):
            self.record_failure(partition, record, offset)
            return
        if not isinstance(record, SessionSummary):
            return
        self.record(partition, record, header_int(headers, EVENTS_OFFSET), offset)
        digest = header(headers, INPUT_HASH)
        if digest and self.cache is not None:
            self.cache.put(digest, record)


@dataclass
class Preload:
    """What a summary-cache preload read (:func:`preload_cache`)."""

    topics: list[str]
    entries: int = 0
    seconds: float = 0.0
    given_up: dict[str, str] = field(default_factory=dict)
    """``topic[partition]`` (``topic[*]``: the whole topic) → why it was not read to its end."""


async def preload_cache(
    kafka: KafkaSettings, topics: Sequence[str], cache: SummaryCache, *, timeout_s: float
) -> Preload:
    """Fill ``cache`` from every summary record of ``topics`` (replay reuses the live summaries), within
    ``timeout_s`` in all.

    One consumer is assigned every partition of every topic and reads them together
    (``topics`` first to last in each fetch: the live summaries topic goes first). A
    partition with no leader is given up at once; whatever is not read to its end when
    the time is up is given up then (``Preload.given_up``). Kafka errors end the preload,
    they are not raised: what the cache lacks is summarized again.
    """
    loop = asyncio.get_running_loop()
    started = loop.time()
    deadline = started + timeout_s
    report = Preload(list(topics))
    consumer = AIOKafkaConsumer(
        **consumer_kwargs(kafka), enable_auto_commit=False, group_id=None, auto_offset_reset="earliest"
    )
    waiting: list[TopicPartition] | None = None  # ``None``: the partitions were never described
    reason = "deadline"
    try:
        async with asyncio.timeout_at(deadline):
            waiting = await _readable_partitions(kafka, topics, report)
            await consumer.start()
            if waiting:
                await read_summaries(consumer, waiting, cache, report)
    except TimeoutError:
        reason = f"not read to its end in {timeout_s:g} s"
    except KafkaError as exc:
        reason = type(exc).__name__
    finally:
        if waiting is None:  # the description itself failed: nothing of any topic was read
            for topic in topics:
                report.given_up.setdefault(f"{topic}[*]", reason)
        for tp in waiting or ():
            report.given_up[f"{tp.topic}[{tp.partition}]"] = reason
        with contextlib.suppress(Exception):
            async with asyncio.timeout(STOP_TIMEOUT_S):
                await consumer.stop()
    report.seconds = round(loop.time() - started, 3)
    return report


STOP_TIMEOUT_S = 5.0
"""The longest a preload waits for its consumer to close (jobs wait for the preload)."""


async def _readable_partitions(kafka: KafkaSettings, topics: Sequence[str], report: Preload) -> list[TopicPartition]:
    """The partitions of ``topics`` with a leader, in the order of ``topics``; the others go to
    ``report.given_up``."""
    from aiokafka.admin import AIOKafkaAdminClient

    from streams.clients.kafka_config import common_kwargs

    admin = AIOKafkaAdminClient(**common_kwargs(kafka))
    await admin.start()
    try:
        described = {d["topic"]: d for d in await admin.describe_topics(list(topics))}
    finally:
        await admin.close()
    out: list[TopicPartition] = []
    for topic in topics:
        found = described.get(topic)
        if found is None or found.get("error_code"):
            report.given_up[f"{topic}[*]"] = f"not described (error {found.get('error_code') if found else None})"
            continue
        for part in sorted(found["partitions"], key=lambda p: int(p["partition"])):
            if part.get("leader", -1) < 0:
                report.given_up[f"{topic}[{part['partition']}]"] = "no leader"
            else:
                out.append(TopicPartition(topic, int(part["partition"])))
    return out


async def read_summaries(consumer: Any, waiting: list[TopicPartition], cache: SummaryCache, report: Preload) -> None:
    """Read ``waiting`` (assigned to ``consumer`` here) from their beginning to their end offsets, putting
    every summary record in ``cache`` (counted in ``report.entries`` as it goes); ``waiting`` holds the
    partitions not read to their end yet (empty on return, what is left if it is cancelled)."""
    consumer.assign(list(waiting))
    ends = await consumer.end_offsets(list(waiting))
    waiting[:] = [tp for tp in waiting if ends.get(tp, 0) > 0]
    if waiting:
        await consumer.seek_to_beginning(*waiting)
    while waiting:
        batch = await consumer.getmany(*waiting, timeout_ms=1000, max_records=5000)
        for messages in batch.values():
            for msg in messages:
                digest = header(msg.headers, INPUT_HASH)
                if digest and msg.value is not None:
                    try:
                        record = decode_summary_record(msg.value)
                    except ValueError:
                        continue
                    if isinstance(record, SessionSummary):
                        cache.put(digest, record)
                        report.entries += 1
        done = {tp for tp in waiting if await consumer.position(tp) >= ends[tp]}
        waiting[:] = [tp for tp in waiting if tp not in done]


__all__ = ["Head", "Preload", "SummaryLedger", "head_of", "preload_cache", "read_summaries", "summary_key"]
