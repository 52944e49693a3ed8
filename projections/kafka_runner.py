"""The Kafka adapter of a stage (the projector, the recall indexer): consume, apply, seek to stored offsets.

Kafka's own committed offsets are never used: the truth is
``projector_offsets`` in Cassandra, written after the rows (see
``projections.projector``). On every partition assignment the consumer seeks
to the stored offset (or the beginning), so a restart, even after SIGKILL,
resumes exactly where the rows stop.

Cassandra unavailable → the assigned partitions are paused, the batch is
retried with exponential backoff capped at ``backoff_max_s`` (2 s by default:
once Cassandra answers again the projector resumes within that, not after a
delay that grew during the outage), the consumer keeps polling so the group
does not evict it, and each attempt logs one clear line. Nothing is skipped.

After a batch (at most every ``min_heartbeat_s``: at a low rate a batch is a
few records, and a heartbeat per batch cost more than the batch), and every
``heartbeat_s`` while idle, the runner writes a
heartbeat per partition (``Projector.save_progress``: its next offset and the
log end offset it saw), which the read side reports as ``projection_lag`` (the
projector) and ``index_lag`` (the indexer).
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition

from projections.errors import StageBehind, StoreUnavailable
from projections.kafka_metadata import install as _track_sent_topics
from projections.projector import replay_topic_prefix
from projections.stage import BatchOutcome, PartitionProgress, SourceRecord, Stage
from schemas import DeadLetter

log = logging.getLogger("distill.projector")
DEFAULT_BACKOFF_MAX_S = 2.0


def next_backoff(delay: float, cap: float, jitter: float = 0.1, rng: Callable[[float, float], float] = random.uniform
                 ) -> float:  # fmt: skip
    """The delay after ``delay``: doubled, jittered by ±``jitter``, never above ``cap`` (pure)."""
    return min(cap, delay * 2 * rng(1 - jitter, 1 + jitter))


class _SeekToStored(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, runner: ProjectorRunner) -> None:
        self._runner = runner

    async def on_partitions_revoked(self, revoked: Sequence[TopicPartition]) -> None:
        self._runner.assigned -= set(revoked)

    async def on_partitions_assigned(self, assigned: Sequence[TopicPartition]) -> None:
        await self._runner.seek_assigned(assigned)


class ProjectorRunner:
    """Runs a stage (``Projector``, ``RecallIndexer``) against Kafka until ``stop()``.

    ``consumer_kwargs``/``producer_kwargs`` come from the composition root
    (``streams.clients.kafka_config``), so this adapter imports no ``streams`` code.
    """

    def __init__(
        self,
        projector: Stage,
        *,
        dead_letter_topic: str,
        consumer_kwargs: dict[str, Any],
        producer_kwargs: dict[str, Any],
        max_batch: int = 2000,
        poll_timeout_ms: int = 200,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = DEFAULT_BACKOFF_MAX_S,
        heartbeat_s: float = 1.0,
        min_heartbeat_s: float = 0.25,
        on_batch: Callable[[BatchOutcome], None] | None = None,
        follow_epochs: bool = False,
    ) -> None:
        """``follow_epochs``: also consume the replays' outputs (``<summaries>.replay-*``, found as
        they are created), so the versions of epochs not served yet are listed too."""
        self.projector = projector
        stage = getattr(projector, "STAGE", "")
        self._log = logging.getLogger({"index": "distill.indexer", "index-deep": "distill.indexer.deep"}
                                      .get(stage, "distill.projector"))  # fmt: skip
        self.dead_letter_topic = dead_letter_topic
        self._consumer_kwargs = consumer_kwargs
        self._producer_kwargs = producer_kwargs
        self.max_batch = max_batch
        self.poll_timeout_ms = poll_timeout_ms
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self.heartbeat_s = heartbeat_s
        self.min_heartbeat_s = min_heartbeat_s
        self._last_heartbeat = 0.0
        self.on_batch = on_batch
        self.follow_epochs = follow_epochs
        self.assigned: set[TopicPartition] = set()
        self._stopping = asyncio.Event()
        self._consumer: AIOKafkaConsumer | None = None
        self._producer: AIOKafkaProducer | None = None

    def stop(self) -> None:
        """Ask the loop to finish its current batch and return."""
        self._stopping.set()

    async def seek_assigned(self, assigned: Sequence[TopicPartition]) -> None:
        """Seek each newly assigned partition to its stored offset (retrying while Cassandra is down)."""
        assert self._consumer is not None
        delay = self.backoff_initial_s
        while True:
            try:
                stored = await self.projector.load_offsets()
                break
            except StoreUnavailable as exc:
                self._log.warning("cannot read stored offsets (%s); retrying in %.1fs", exc, delay)
                await asyncio.sleep(delay)
                delay = next_backoff(delay, self.backoff_max_s)
        for tp in assigned:
            offset = stored.get((tp.topic, tp.partition))
            if offset is None:
                await self._consumer.seek_to_beginning(tp)
            else:
                self._consumer.seek(tp, offset)
        self.assigned |= set(assigned)
        self._log.info("assigned %s", ", ".join(f"{tp.topic}[{tp.partition}]@{stored.get((tp.topic, tp.partition), 0)}"
                                          for tp in sorted(assigned)))  # fmt: skip

    async def run(self) -> None:
        """Consume until ``stop()``; projects each polled batch, retrying it while Cassandra is unavailable."""
        p = self.projector
        _track_sent_topics()  # this process's producers keep their topics' metadata: see projections.kafka_metadata
        kwargs = dict(self._consumer_kwargs)
        if self.follow_epochs:  # a new replay's output is found within seconds, not at the 5-minute default
            kwargs.setdefault("metadata_max_age_ms", 5000)
        self._consumer = AIOKafkaConsumer(
            **kwargs,
            group_id=p.consumer_group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
        )
        self._producer = AIOKafkaProducer(**self._producer_kwargs)
        summaries_topic = getattr(p, "summaries_topic", None)
        if self.follow_epochs and summaries_topic is not None:  # the projector: the replays' outputs too
            names = [*(re.escape(t) for t in p.topics), re.escape(replay_topic_prefix(summaries_topic)) + ".+"]
            pattern = "^(?:" + "|".join(names) + ")$"
            self._consumer.subscribe(pattern=pattern, listener=_SeekToStored(self))
        else:
            self._consumer.subscribe(list(p.topics), listener=_SeekToStored(self))
        await self._producer.start()
        await self._consumer.start()
        try:
            while not self._stopping.is_set():
                polled = await self._consumer.getmany(timeout_ms=self.poll_timeout_ms, max_records=self.max_batch)
                records = [
                    SourceRecord(r.topic, r.partition, r.offset, r.key, r.value, r.timestamp or 0,
                                 tuple(r.headers or ()))
                    for batch in polled.values() for r in batch
                ]  # fmt: skip
                if records:
                    outcome = await self._project_with_retry(records)
                    if outcome is None:  # stopped while the batch waited: no heartbeat claims it
                        break
                    if time.monotonic() - self._last_heartbeat >= self.min_heartbeat_s:
                        await self._heartbeat(None)
                    if self.on_batch is not None:
                        self.on_batch(outcome)
                elif time.monotonic() - self._last_heartbeat >= self.heartbeat_s:
                    await self._heartbeat(None)
        finally:
            await self._consumer.stop()
            await self._producer.stop()

    async def _project_with_retry(self, records: list[SourceRecord]) -> BatchOutcome | None:
        """The batch's outcome, retried while Cassandra is unavailable or a stage waited for is behind;
        ``None``: stopped meanwhile, the batch not projected (nor its offsets stored)."""
        assert self._consumer is not None
        delay = self.backoff_initial_s
        resumed: tuple[int, str] | None = None  # the consumer is paused: the level and text of its resumption
        outcome: BatchOutcome | None = None
        try:
            while True:
                try:
                    outcome = await self.projector.project(
                        records, self._send_dead_letter, save_offsets=self._still_assigned
                    )
                    return outcome
                except StoreUnavailable as exc:
                    if resumed is None:
                        self._consumer.pause(*self._consumer.assignment())
                    behind = isinstance(exc, StageBehind)
                    resumed = (logging.DEBUG, "the stage waited for caught up") if behind else (
                        logging.INFO, "cassandra reachable again")  # fmt: skip
                    if behind:
                        # Routine for a stage of lower priority under load (the deep index stage): not INFO.
                        self._log.debug("consumer paused, %d records held, retrying in %.1fs: %s", len(records),
                                        delay, exc)  # fmt: skip
                    else:
                        self._log.error(
                            "cassandra unavailable, consumer paused, %d records held, retrying in %.1fs: %s",
                            len(records), delay, exc,
                        )  # fmt: skip
                    if self._stopping.is_set():
                        # Stopping: the batch is left for the next start (its offsets are stored only
                        # after its rows). A stage waiting for another (the deep index stage behind the
                        # primary, itself stopping) would otherwise hold the shutdown for ever.
                        self._log.info("stopping: %d records held are left to the next start", len(records))
                        return None
                    await self._wait(delay)
                    delay = next_backoff(delay, self.backoff_max_s)
        finally:
            if resumed is not None:
                self._consumer.resume(*self._consumer.assignment())
                if outcome is not None:  # not when stopping: the batch was left, nothing came back
                    self._log.log(resumed[0], "%s, consumer resumed", resumed[1])

    async def _wait(self, delay: float) -> None:
        # Keep polling (paused partitions return nothing) so the group keeps us as a live member.
        assert self._consumer is not None
        deadline = asyncio.get_running_loop().time() + delay
        while (left := deadline - asyncio.get_running_loop().time()) > 0 and not self._stopping.is_set():
            # A rebalance may have handed us new, unpaused partitions: pause everything again,
            # and put back anything fetched anyway so that no record is skipped.
            self._consumer.pause(*self._consumer.assignment())
            polled = await self._consumer.getmany(timeout_ms=int(min(left, 1.0) * 1000))
            for tp, batch in polled.items():
                if batch:
                    self._consumer.seek(tp, batch[0].offset)

    async def _heartbeat(self, offsets: dict[tuple[str, int], int] | None) -> None:
        """Write the progress of ``offsets``' partitions (``None``: every assigned one, idle); never raises."""
        assert self._consumer is not None
        self._last_heartbeat = time.monotonic()
        try:
            if offsets is None:
                offsets = {(tp.topic, tp.partition): await self._consumer.position(tp) for tp in self.assigned}
            progress = []
            for (topic, partition), next_offset in offsets.items():
                if TopicPartition(topic, partition) not in self.assigned:
                    continue
                end = self._consumer.highwater(TopicPartition(topic, partition))
                seen = end if end is not None else next_offset
                progress.append(PartitionProgress(topic, partition, next_offset, seen))
            if progress:
                await self.projector.save_progress(progress)
        except Exception as exc:  # a heartbeat is advisory: the next one retries, projection goes on
            self._log.warning("projector heartbeat not written: %s", exc)

    def _still_assigned(self, tp: tuple[str, int]) -> bool:
        return TopicPartition(*tp) in self.assigned

    async def _send_dead_letter(self, letter: DeadLetter) -> None:
        assert self._producer is not None
        key = f"{letter.source_topic}/{letter.source_partition}/{letter.source_offset}".encode()
        await self._producer.send_and_wait(self.dead_letter_topic, letter.model_dump_json().encode(), key=key)
        self._log.warning(
            "dead letter: %s[%d]@%d %s: %s",
            letter.source_topic, letter.source_partition, letter.source_offset, letter.error_class, letter.reason,
        )  # fmt: skip
