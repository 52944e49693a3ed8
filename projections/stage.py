"""What the two Cassandra stages (the projector and the recall indexer) share.

A *stage* consumes topics under its own consumer group and keeps its offsets
in ``projector_offsets`` beside the rows it writes (stored only after them),
and its heartbeat in ``projector_progress`` (tagged with the stage's name, so
the read side tells "the prompt may miss events" from "search may miss
events"). ``projections.kafka_runner.ProjectorRunner`` runs any stage.

Here: the records handed over by the adapter, the outcome of a batch, dead
letters, offsets and progress, and the driver bridge (concurrent writes,
unlogged single-partition batches with a statement-by-statement replay that
pins a rejection on the record at fault).
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from cassandra import DriverException, InvalidRequest, RequestExecutionException
from cassandra.cluster import NoHostAvailable, Session
from cassandra.query import BatchStatement, BatchType, PreparedStatement

from projections import statements as q
from projections.cassandra_session import aexecute
from projections.errors import StoreUnavailable
from schemas import DeadLetter

_TRANSIENT = (NoHostAvailable, RequestExecutionException, OSError, TimeoutError)
PROJECT_STAGE = "project"
"""The projector's stage name (dead letters, ``projector_progress.stage``)."""
INDEX_STAGE = "index"
"""The recall indexer's stage name."""


@dataclass(frozen=True)
class SourceRecord:
    """One consumed Kafka record, as the adapter hands it over."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int = 0


@dataclass(frozen=True)
class PartitionProgress:
    """Where a stage stands on one partition: the next offset to process and the log end it saw."""

    topic: str
    partition: int
    next_offset: int
    log_end_offset: int


@dataclass
class BatchOutcome:
    """What one ``project`` call did (for logs, metrics and tests)."""

    events: int = 0
    summaries: int = 0
    stale_summaries: int = 0
    deletes: int = 0
    ignored: int = 0
    dead_letters: list[DeadLetter] = field(default_factory=list)
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    skipped_deleted: int = 0
    """Indexer: events not indexed because a later ``delete_session`` already removed their session."""


DeadLetterSink = Callable[[DeadLetter], Awaitable[None]]


class Stage(Protocol):
    """What ``ProjectorRunner`` needs of a stage."""

    consumer_group: str

    @property
    def topics(self) -> tuple[str, ...]: ...

    async def load_offsets(self) -> dict[tuple[str, int], int]: ...

    async def project(
        self, records: Sequence[SourceRecord], dead_letters: DeadLetterSink, *,
        save_offsets: Callable[[tuple[str, int]], bool] = ...,
    ) -> BatchOutcome: ...  # fmt: skip

    async def save_progress(self, progress: Iterable[PartitionProgress], now: datetime | None = None) -> None: ...


def dead_letter(record: SourceRecord, exc: BaseException, reason: str | None = None, stage: str = "project"
                ) -> DeadLetter:  # fmt: skip
    """A ``DeadLetter`` for ``record`` rejected with ``exc`` by ``stage``."""
    return DeadLetter(
        source_topic=record.topic,
        source_partition=record.partition,
        source_offset=record.offset,
        key_b64=base64.b64encode(record.key).decode() if record.key is not None else None,
        value_b64=base64.b64encode(record.value or b"").decode(),
        error_class=type(exc).__name__,
        reason=(reason or str(exc))[:2000],
        stage=stage,
        failed_at=datetime.now(UTC),
    )


@dataclass
class Batch:
    """Statements of one Cassandra partition written together: ``(statement, params, index of the record)``."""

    entries: list[tuple[PreparedStatement, Any, int]] = field(default_factory=list)

    def statement(self) -> Any:
        if len(self.entries) == 1:
            return self.entries[0][0]
        batch = BatchStatement(batch_type=BatchType.UNLOGGED)
        for stmt, params, _ in self.entries:
            batch.add(stmt, params)
        return batch

    def params(self) -> Any:
        return self.entries[0][1] if len(self.entries) == 1 else None


Row = tuple[PreparedStatement, Any, int, int]
"""``(statement, params, index of the record, approximate bytes)``."""


def cut_batches(groups: Iterable[list[Row]], max_statements: int, max_bytes: int) -> list[Batch]:
    """Each partition's statements as batches of at most ``max_statements`` and about ``max_bytes``."""
    batches: list[Batch] = []
    for statements in groups:
        current = Batch()
        size = 0
        for stmt, params, index, row_bytes in statements:
            if current.entries and (len(current.entries) >= max_statements or size + row_bytes > max_bytes):
                batches.append(current)
                current, size = Batch(), 0
            current.entries.append((stmt, params, index))
            size += row_bytes
        batches.append(current)
    return batches


class CassandraStage:
    """Offsets, progress and the driver bridge of a stage over one keyspace (one instance per process)."""

    STAGE = PROJECT_STAGE
    """The stage's name: in its dead letters and on its heartbeat rows (``projector_progress.stage``)."""

    def __init__(
        self, session: Session, keyspace: str, *, consumer_group: str, concurrency: int = 32,
        batch_statements: int = 64, batch_bytes: int = 512 * 1024, pipeline_events: int = 500,
    ) -> None:  # fmt: skip
        self._session = session
        self._ks = keyspace
        self.consumer_group = consumer_group
        self._concurrency = concurrency
        self.batch_statements = batch_statements
        self.batch_bytes = batch_bytes
        self.pipeline_events = pipeline_events
        self._stage_p = {
            name: session.prepare(cql.format(ks=keyspace))
            for name, cql in {"save_offset": q.SAVE_OFFSET, "load_offsets": q.LOAD_OFFSETS,
                              "progress": q.SAVE_PROGRESS, "progress_caught_up": q.SAVE_PROGRESS_CAUGHT_UP}.items()
        }  # fmt: skip

    # -- offsets ---------------------------------------------------------------------------------------------

    async def load_offsets(self) -> dict[tuple[str, int], int]:
        """The stored ``next_offset`` of every ``(topic, partition)`` of this consumer group."""
        rows = await self._run(self._stage_p["load_offsets"], (self.consumer_group,))
        return {(r.topic, r.partition): r.next_offset for r in rows}

    async def _save_offsets(self, offsets: dict[tuple[str, int], int]) -> None:
        # One partition (the consumer group): one unlogged batch is one mutation, atomic on its replica.
        batch = BatchStatement(batch_type=BatchType.UNLOGGED)
        for (topic, partition), offset in sorted(offsets.items()):
            batch.add(self._stage_p["save_offset"], (self.consumer_group, topic, partition, offset))
        await self._run(batch, None)

    async def save_progress(self, progress: Iterable[PartitionProgress], now: datetime | None = None) -> None:
        """Write the heartbeat row of each partition (``projector_progress``), read as the stage's lag.

        ``caught_up_at`` is set only when the partition has nothing left to
        process, so "seconds since caught up" is what a reader can act on.
        """
        at = now or datetime.now(UTC)
        work: list[tuple[Any, Any]] = []
        for pp in progress:
            end = max(pp.log_end_offset, pp.next_offset)
            if pp.next_offset >= end:
                work.append((self._stage_p["progress_caught_up"], (pp.next_offset, end, at, at, self.STAGE, pp.topic,
                                                                   pp.partition, self.consumer_group)))  # fmt: skip
            else:
                work.append((self._stage_p["progress"], (pp.next_offset, end, at, self.STAGE, pp.topic, pp.partition,
                                                         self.consumer_group)))  # fmt: skip
        failed = await self._run_concurrent(work)
        if failed:
            raise StoreUnavailable(f"cassandra progress write failed: {failed[0][1]}")

    # -- writes ----------------------------------------------------------------------------------------------

    async def _write_pipelined(self, count: int, build: Callable[[int, int], list[Batch]]) -> dict[int, BaseException]:
        """Write the batches ``build(start, stop)`` makes of records ``[0, count)``; the rejected ones by index.

        The records are handled in chunks of ``pipeline_events``: the rows of
        the next chunk are built while the previous chunk's writes are in
        flight (at most two chunks), so the CPU work here overlaps Cassandra's.
        Every write must be an idempotent upsert, so their relative order is
        free. A batch Cassandra rejects (``InvalidRequest``) is replayed
        statement by statement to name exactly the records at fault; any
        other failure raises ``StoreUnavailable``.
        """
        step = max(1, self.pipeline_events)
        in_flight: list[tuple[list[Batch], asyncio.Future[Any]]] = []
        failures: list[tuple[Batch, BaseException]] = []

        async def settle(batches: list[Batch], future: asyncio.Future[Any]) -> None:
            try:
                results = await future
            except _TRANSIENT as exc:
                raise StoreUnavailable(f"cassandra unavailable: {type(exc).__name__}: {exc}") from exc
            failures.extend((batches[i], r.result_or_exc) for i, r in enumerate(results) if not r.success)

        try:
            for start in range(0, count, step):
                batches = build(start, min(count, start + step))
                if not batches:
                    continue
                work = [(b.statement(), b.params()) for b in batches]
                future = asyncio.wrap_future(self._submit_concurrent(work))
                in_flight.append((batches, future))
                if len(in_flight) >= 2:
                    await settle(*in_flight.pop(0))
            while in_flight:
                await settle(*in_flight.pop(0))
        finally:
            for _, future in in_flight:  # an error above: let the remaining writes finish quietly
                future.add_done_callback(lambda f: f.exception())
        rejected: dict[int, BaseException] = {}
        for batch, exc in failures:
            if not isinstance(exc, InvalidRequest):
                raise StoreUnavailable(f"cassandra write failed: {type(exc).__name__}: {exc}") from exc
            singles = await self._run_concurrent((stmt, params) for stmt, params, _ in batch.entries)
            for position, single_exc in singles:
                if not isinstance(single_exc, InvalidRequest):
                    raise StoreUnavailable(
                        f"cassandra write failed: {type(single_exc).__name__}: {single_exc}"
                    ) from single_exc
                rejected.setdefault(batch.entries[position][2], single_exc)
        return rejected

    # -- driver bridge ---------------------------------------------------------------------------------------

    async def _run(self, statement: Any, params: Any) -> Any:
        try:
            return await aexecute(self._session, statement, params)
        except _TRANSIENT as exc:
            raise StoreUnavailable(f"cassandra unavailable: {type(exc).__name__}: {exc}") from exc
        except DriverException as exc:
            raise StoreUnavailable(f"cassandra driver error: {type(exc).__name__}: {exc}") from exc

    def _submit_concurrent(self, work: list[tuple[Any, Any]]) -> concurrent.futures.Future[Any]:
        """``execute_concurrent_async``, with its failure to start turned into ``StoreUnavailable``.

        With every host down the driver fails the first statements while
        submitting, then fails itself sorting their errors and raises
        ``InvalidStateError`` from the submission: that is an outage, to be
        retried like ``NoHostAvailable``, not a crash of the stage.
        """
        try:
            future: concurrent.futures.Future[Any] = self._session.execute_concurrent_async(
                work, concurrency=self._concurrency, raise_on_first_error=False
            )
        except concurrent.futures.InvalidStateError as exc:
            raise StoreUnavailable(f"cassandra unavailable: the driver could not submit the writes: {exc}") from exc
        return future

    async def _run_concurrent(self, work: Iterable[tuple[Any, Any]]) -> list[tuple[int, BaseException]]:
        """Run ``work`` with bounded concurrency; returns the failures as ``(position, exception)``."""
        items = list(work)
        if not items:
            return []
        try:
            results = await asyncio.wrap_future(self._submit_concurrent(items))
        except _TRANSIENT as exc:
            raise StoreUnavailable(f"cassandra unavailable: {type(exc).__name__}: {exc}") from exc
        return [(i, r.result_or_exc) for i, r in enumerate(results) if not r.success]
