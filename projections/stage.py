"""What the two Cassandra stages (the projector and the recall indexer) share.

A *stage* consumes topics under its own consumer group and keeps its offsets
in ``projector_offsets`` beside the rows it writes (stored only after them),
and its heartbeat in ``projector_progress`` (tagged with the stage's name, so
the read side tells "the prompt may miss events" from "search may miss
events"). ``projections.kafka_runner.ProjectorRunner`` runs any stage.

Here: the records handed over by the adapter, how both stages parse an
events-topic record and judge it by its session's key (one step, so the index
never holds what the projector refuses), the outcome of a batch, dead
letters, offsets and progress, and the driver bridge (concurrent writes,
unlogged single-partition batches with a statement-by-statement replay that
pins a rejection on the record at fault).
"""

from __future__ import annotations

import asyncio
import base64
import struct
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, Protocol, TypeVar

from cassandra import DriverException, InvalidRequest, RequestExecutionException
from cassandra.cluster import NoHostAvailable, Session
from cassandra.connection import ConnectionBusy
from cassandra.query import BatchStatement, BatchType
from pydantic import ValidationError

from projections import statements as q
from projections.binding import RowBinder, batch_of
from projections.cassandra_paging import afetch_all
from projections.cassandra_session import aexecute, aexecute_many
from projections.errors import StoreRefused, StoreUnavailable
from projections.late_events import LatestStamps, Partition
from projections.session_keys import Fixed, KnownKeys, SessionKeys
from schemas import DeadLetter, DeleteSession, SessionEvent, SessionKey, Summarize, SummarizeSync
from schemas.event_ids import EventIdReused, FirstDigests, record_digest
from schemas.record_keys import RecordKeyError, fixes_session_key, only_fixes_key
from schemas.records import RecordDecodeError, json_object, parse_event_data, refuse_oversized
from schemas.storable import refuse_unstorable

_TRANSIENT = (NoHostAvailable, RequestExecutionException, OSError, TimeoutError)
PROJECT_STAGE = "project"
"""The projector's stage name (dead letters, ``projector_progress.stage``)."""
INDEX_STAGE = "index"
"""The recall indexer's stage name (its primary stage: everything but the deep chunks of long documents)."""
DEEP_INDEX_STAGE = "index-deep"
"""The recall indexer's deep stage (``RecallIndexer(scope="deep")``): the later chunks of long documents."""
INDEX_STAGES = frozenset({INDEX_STAGE, DEEP_INDEX_STAGE})
"""The stages that build the recall index (not the critical path)."""
_Parsed = TypeVar("_Parsed")
_Command = TypeVar("_Command", DeleteSession, Summarize | SummarizeSync)


@dataclass(frozen=True)
class SourceRecord:
    """One consumed Kafka record, as the adapter hands it over."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int = 0
    headers: tuple[tuple[str, bytes], ...] = ()


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
    epoch_summaries: int = 0
    """Summaries of a replay's output (history rows only)."""
    adoptions: int = 0
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


@dataclass(frozen=True)
class EventItem:
    """An event of the events topic, parsed and judged storable (:func:`parse_session_record`)."""

    record: SourceRecord
    event: SessionEvent
    data: dict[str, Any] | None
    """The decoded record ``event`` was validated from (the projector's stored JSON is made from it;
    ``None``: not kept)."""
    digest: str
    """The record's ``schemas.event_ids.record_digest`` (what its event id is judged by)."""

    @property
    def session_key(self) -> SessionKey:
        return self.event.session_key


@dataclass(frozen=True)
class _CommandRecord(Generic[_Command]):
    record: SourceRecord
    command: _Command

    @property
    def session_key(self) -> SessionKey:
        return self.command.session_key


class DeleteItem(_CommandRecord[DeleteSession]):
    """A ``delete_session`` of the events topic: a barrier of both stages."""


class CommandItem(_CommandRecord[Summarize | SummarizeSync]):
    """A ``summarize`` / ``summarize_sync`` command: the worker's, but it may fix its session's key
    (``schemas.record_keys.only_fixes_key``)."""


SessionItem = EventItem | DeleteItem | CommandItem
"""An events-topic record both stages read and judge by its session's Kafka key (``schemas.record_keys``)."""

Refused = RecordDecodeError | ValidationError
"""Why a record is refused: the worker's class and reason (``RecordKeyError`` and ``OversizedRecord`` are
``RecordDecodeError``\ s)."""


def parse_session_record(
    record: SourceRecord, max_record_bytes: int | None, *, keep_data: bool = True
) -> SessionItem | None:
    """One events-topic record as both stages take it: its event, deletion or command (``None``: an
    ``adopt_epoch``, the worker's alone). ``keep_data``: an event keeps its decoded record
    (``EventItem.data``).

    Raises what the worker refuses the record for, in its words: ``RecordDecodeError`` (no value, over
    ``max_record_bytes``: ``OversizedRecord``, not a JSON object, not storable: ``schemas.storable``) or a
    ``ValidationError``.
    """
    if record.value is None:
        raise RecordDecodeError("empty record value")
    refuse_oversized(record.value, max_record_bytes)
    data = json_object(record.value)
    refuse_unstorable(record.value, data)
    parsed = parse_event_data(data)
    if isinstance(parsed, SessionEvent):
        # Kept only for a stage that uses it: a batch's decoded records, alive until it is written, cost the
        # indexer ~4 µs an event of garbage collection.
        return EventItem(record, parsed, data if keep_data else None, record_digest(record.value))
    if isinstance(parsed, DeleteSession):
        return DeleteItem(record, parsed)
    if only_fixes_key(parsed):
        return CommandItem(record, parsed)
    return None


def record_key_row(fixed: tuple[SessionKey, Fixed, int], topic: str) -> tuple[Any, ...]:
    """The ``session_record_keys`` row (``INSERT_RECORD_KEY``) of one entry of ``SessionKeys.fixed``."""
    session, (key, partition), offset = fixed
    return (*session, key, topic, partition, offset)


@dataclass
class Batch:
    """Rows of one Cassandra partition written together: ``(binder, row, index of the record)``."""

    entries: list[tuple[RowBinder, Any, int]] = field(default_factory=list)
    size: int = 0
    """Approximate bytes of the rows."""

    def statement(self) -> Any:
        """One statement for the whole batch (an unlogged batch, or the bound statement of a single row)."""
        return batch_of([(binder, row) for binder, row, _ in self.entries])


Row = tuple[RowBinder, Any, int, int]
"""``(binder, row, index of the record, approximate bytes)``."""


_BUSY_RETRIES = 200
_BUSY_DELAY_S = 0.02
"""A write refused because the connection's socket is full is resent after this, up to ``_BUSY_RETRIES`` times."""


def _busy(exc: BaseException) -> bool:
    """The driver refused to send: every host's connection was busy (backpressure, not an outage)."""
    errors = getattr(exc, "errors", None)
    if not isinstance(exc, NoHostAvailable) or not isinstance(errors, dict) or not errors:
        return False
    return all(isinstance(e, ConnectionBusy) for e in errors.values())


_MIN_BATCH_STATEMENTS = 4
MAX_BATCH_PARTITIONS = 10
"""Partitions per multi-partition batch: at Cassandra's ``unlogged_batch_across_partitions_warn_threshold``."""


def cut_batches(
    groups: Iterable[Iterable[list[Row]]], max_statements: int, max_bytes: int,
    max_partitions: int = MAX_BATCH_PARTITIONS,
) -> list[Batch]:  # fmt: skip
    """Each group's partitions (lists of rows) as unlogged batches within the three caps.

    A group is a set of partitions that live on the same replicas
    (:class:`ReplicaGroups`): one batch of several of them is one message to
    a coordinator that is a replica of every one, which applies each
    partition's mutation locally; the rows of one partition stay together in
    a batch (one mutation) as far as the caps allow. Fewer, fuller messages
    are what makes the driver cheap per row: its cost is mostly per message.
    """
    batches: list[Batch] = []
    for partitions in groups:
        current = Batch()
        count = 0
        for rows in partitions:
            if current.entries and count >= max_partitions:
                batches.append(current)
                current, count = Batch(), 0
            count += 1
            rows_bytes = sum(r[3] for r in rows)
            if len(current.entries) + len(rows) <= max_statements and current.size + rows_bytes <= max_bytes:
                # The usual case: the whole partition fits (one pass, no checks per row).
                current.entries.extend([(binder, row, index) for binder, row, index, _ in rows])
                current.size += rows_bytes
                continue
            for binder, row, index, row_bytes in rows:
                if current.entries and (len(current.entries) >= max_statements or current.size + row_bytes > max_bytes):
                    batches.append(current)
                    current, count = Batch(), 1
                current.entries.append((binder, row, index))
                current.size += row_bytes
        if current.entries:
            batches.append(current)
    return batches


class ReplicaGroups:
    """Groups partition keys by the replicas that own them (the driver's token map)."""

    def __init__(self, session: Session, keyspace: str) -> None:
        self._metadata = getattr(getattr(session, "cluster", None), "metadata", None)
        self._ks = keyspace

    def key(self, parts: Sequence[str]) -> frozenset[Any]:
        """The ids of the replicas of the partition ``parts`` (its text key columns); empty when unknown."""
        if self._metadata is None:
            return frozenset()
        encoded = [p.encode() for p in parts]
        packed = encoded[0] if len(encoded) == 1 else b"".join(struct.pack(">H", len(b)) + b + b"\x00" for b in encoded)
        return frozenset(h.host_id for h in self._metadata.get_replicas(self._ks, packed))

    def group(self, partitions: Mapping[Any, list[Row]]) -> list[list[list[Row]]]:
        """``partitions`` (key → rows) as groups of partitions sharing their replicas."""
        groups: dict[frozenset[Any], list[list[Row]]] = {}
        for key, rows in partitions.items():
            groups.setdefault(self.key(key), []).append(rows)
        return list(groups.values())


class CassandraStage:
    """Offsets, progress and the driver bridge of a stage over one keyspace (one instance per process)."""

    STAGE = PROJECT_STAGE
    """The stage's name: in its dead letters and on its heartbeat rows (``projector_progress.stage``)."""
    events_topic: str
    """Set by the stage: the topic of the sessions' events and commands."""
    _stamps: LatestStamps
    """Set by the stage: its sessions' latest timestamps (``projections.late_events``)."""
    _keys: KnownKeys
    """Set by the stage: the record keys it remembers (``projections.session_keys``)."""
    _digests: FirstDigests
    """Set by the stage: the first digest of each event id of the sessions it remembers (``schemas.event_ids``)."""

    def __init__(
        self, session: Session, keyspace: str, *, consumer_group: str, concurrency: int = 32,
        batch_statements: int = 128, batch_bytes: int = 512 * 1024, pipeline_events: int = 2000,
        in_flight_bytes: int = 8 * 1024 * 1024,
    ) -> None:  # fmt: skip
        self._session = session
        self._ks = keyspace
        self.consumer_group = consumer_group
        self._concurrency = concurrency
        self.batch_statements = batch_statements
        self.batch_bytes = batch_bytes
        self.pipeline_events = pipeline_events
        self.in_flight_bytes = in_flight_bytes
        self._replicas = ReplicaGroups(session, keyspace)
        self._stage_p = {
            name: session.prepare(cql.format(ks=keyspace))
            for name, cql in {"save_offset": q.SAVE_OFFSET, "load_offsets": q.LOAD_OFFSETS,
                              "progress": q.SAVE_PROGRESS, "progress_caught_up": q.SAVE_PROGRESS_CAUGHT_UP,
                              "select_record_key": q.SELECT_RECORD_KEY, "select_digests": q.SELECT_DIGESTS,
                              "insert_record_key": q.INSERT_RECORD_KEY}.items()
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

    def _cut(self, partitions: Mapping[Any, list[Row]]) -> list[Batch]:
        """``partitions`` (key → rows) as batches: grouped by replicas, within the caps.

        A batch is applied by one thread of the coordinator, so a few rows are
        spread over up to ``concurrency`` batches rather than sent as one: a
        small batch (a quiet moment) is then written in the time of a few
        rows, a large one still in full batches of ``batch_statements``.
        """
        rows = sum(len(r) for r in partitions.values())
        per_batch = max(_MIN_BATCH_STATEMENTS, min(self.batch_statements, -(-rows // self._concurrency)))
        return cut_batches(self._replicas.group(partitions), per_batch, self.batch_bytes)

    async def _write_pipelined(self, count: int, build: Callable[[int, int], list[Batch]]) -> dict[int, BaseException]:
        """Write the batches ``build(start, stop)`` makes of records ``[0, count)``; the rejected ones by index.

        The records are handled in chunks of ``pipeline_events``: the rows of
        the next chunk are built while the previous chunk's writes are in
        flight (at most two chunks), so the CPU work here overlaps Cassandra's
        (``aexecute_many`` sends from the driver's thread, the loop is free).
        Every write must be an idempotent upsert, so their relative order is
        free. A batch Cassandra rejects (``InvalidRequest``) is replayed
        statement by statement to name exactly the records at fault; any
        other failure raises ``StoreUnavailable``.
        """
        step = max(1, self.pipeline_events)
        in_flight: list[tuple[list[Batch], asyncio.Future[Any]]] = []
        failures: list[tuple[Batch, BaseException]] = []

        def submit(batches: list[Batch]) -> asyncio.Future[Any]:
            # Bytes in flight, not only statements, are bounded: a run of 50 KB tool results in 512 KB
            # batches would fill the socket faster than Cassandra reads it (the driver: ConnectionBusy).
            mean = max(1, sum(b.size for b in batches) // len(batches))
            concurrency = max(2, min(self._concurrency, self.in_flight_bytes // 2 // mean))
            return aexecute_many(self._session, [(b.statement(), None) for b in batches], concurrency)

        async def settle(batches: list[Batch], future: asyncio.Future[Any]) -> None:
            for attempt in range(_BUSY_RETRIES + 1):
                results = await future
                busy = [batches[i] for i, (ok, value) in enumerate(results) if not ok and _busy(value)]
                failures.extend((batches[i], value) for i, (ok, value) in enumerate(results)
                                if not ok and not _busy(value))  # fmt: skip
                if not busy:
                    return
                if attempt == _BUSY_RETRIES:
                    failures.extend((b, StoreUnavailable("cassandra connection stayed overloaded")) for b in busy)
                    return
                await asyncio.sleep(_BUSY_DELAY_S)  # the socket drains; the writes are idempotent: resend them
                batches, future = busy, submit(busy)

        try:
            for start in range(0, count, step):
                batches = build(start, min(count, start + step))
                if not batches:
                    continue
                in_flight.append((batches, submit(batches)))
                await asyncio.sleep(0)  # building and binding a chunk is CPU: let other tasks of the loop run
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
            singles = await self._run_concurrent((binder.bound(row), None) for binder, row, _ in batch.entries)
            for position, single_exc in singles:
                if not isinstance(single_exc, InvalidRequest):
                    raise StoreUnavailable(
                        f"cassandra write failed: {type(single_exc).__name__}: {single_exc}"
                    ) from single_exc
                rejected.setdefault(batch.entries[position][2], single_exc)
        return rejected

    # -- parse and judge -------------------------------------------------------------------------------------

    async def _parse_and_judge(
        self, records: Sequence[SourceRecord], outcome: BatchOutcome, parse: Callable[[SourceRecord], _Parsed],
    ) -> tuple[list[tuple[SourceRecord, _Parsed | Refused]], SessionKeys]:  # fmt: skip
        """Each of ``records`` (in log order) as ``parse`` makes it (``parse_session_record`` for the events
        topic), or why it is refused: what ``parse`` raises, or, for a :data:`SessionItem` whose Kafka key or
        partition is not its session's (``schemas.record_keys``, judged in log order), ``RecordKeyError`` with
        the worker's reason (never for a ``CommandItem``: it only fixes the key), and for an :class:`EventItem`
        whose event id its session's log already holds with other content (``schemas.event_ids``, judged in
        log order after the key), ``EventIdReused`` with the worker's reason. Also the batch's
        ``SessionKeys``: what it fixed, to be written with its rows. Every record moves ``outcome.offsets``
        past it, and the latest offset the stage's stamps and digests follow.
        """
        parsed: list[tuple[SourceRecord, _Parsed | Refused]] = []
        known = self._keys
        for record in records:
            key = (record.topic, record.partition)
            outcome.offsets[key] = max(outcome.offsets.get(key, 0), record.offset + 1)
            if record.topic == self.events_topic:
                self._stamps.follow(key, record.offset)
                self._digests.follow(key, record.offset)
            try:
                parsed.append((record, parse(record)))
            except (RecordDecodeError, ValidationError) as exc:
                parsed.append((record, exc))
        judged = [(n, item, item.session_key) for n, (_, item) in enumerate(parsed)
                  if isinstance(item, EventItem | DeleteItem | CommandItem)]  # fmt: skip
        keys = SessionKeys(known, await self._read_record_keys(known, (session for _, _, session in judged)))
        for n, item, session in judged:
            r = item.record
            decoded = item.event if isinstance(item, EventItem) else item.command
            problem = keys.judge(r.key, r.partition, r.offset, session, fixes=fixes_session_key(decoded))
            if problem is not None and not isinstance(item, CommandItem):
                parsed[n] = (r, RecordKeyError(problem))
        events = [(n, item) for n, item, _ in judged if isinstance(item, EventItem) and parsed[n][1] is item]
        await self._learn_digests([((item.record.topic, item.record.partition), item.session_key)
                                   for _, item in events])  # fmt: skip
        digests = self._digests
        for n, item, session in judged:
            r = item.record
            tp = (r.topic, r.partition)
            if isinstance(item, DeleteItem) and parsed[n][1] is item:
                # Judged in log order: the records after a deletion start the session's ids afresh.
                digests.forget(tp, session)
            elif isinstance(item, EventItem) and parsed[n][1] is item:
                reused = digests.judge(tp, session, item.event.event_id, item.digest)
                if reused is not None:
                    parsed[n] = (r, EventIdReused(reused))
        return parsed, keys

    # -- event ids (schemas.event_ids) -----------------------------------------------------------------------

    async def _learn_digests(self, sessions: Iterable[tuple[Partition, SessionKey]]) -> None:
        """Read the first digest of every event id of each of ``sessions`` that the stage's digests do not
        know (``event_ids``, one partition each, read concurrently) and remember them.

        An id projected before migration 012 has no digest: it is not remembered, so the first record of
        it read after the upgrade fixes its digest. A session without a row has no event (an event's rows
        are one mutation of its session's partition): the projector's stamps learn that too, so a new
        session costs one read, not two (the indexer's stamps are of its own rows)."""
        digests = self._digests
        cold = [key for key in dict.fromkeys(sessions) if not digests.knows(*key)]
        if not cold:
            return
        statement = self._stage_p["select_digests"]
        pages: list[list[Any]] = []
        try:
            for start in range(0, len(cold), self._concurrency):
                chunk = cold[start : start + self._concurrency]
                pages.extend(await asyncio.gather(*(afetch_all(self._session, statement, pk) for _, pk in chunk)))
        except DriverException as exc:
            raise StoreUnavailable(f"cassandra read failed: {type(exc).__name__}: {exc}") from exc
        stamps = self._stamps if self.STAGE == PROJECT_STAGE else None
        for (tp, pk), rows in zip(cold, pages, strict=True):
            digests.learn(tp, pk, {r.event_id: r.digest for r in rows if r.digest is not None})
            if not rows and stamps is not None and not stamps.knows(tp, pk):
                stamps.learn(tp, pk, None)

    # -- record keys (projections.session_keys) --------------------------------------------------------------

    async def _read_record_keys(
        self, known: KnownKeys, sessions: Iterable[SessionKey]
    ) -> dict[SessionKey, Fixed | None]:
        """The fixed key and partition (``session_record_keys``) of each of ``sessions`` that ``known`` lacks
        (one row each, read concurrently; ``None``: none fixed yet)."""
        cold = known.missing(sessions)
        rows = await self._read_many(self._stage_p["select_record_key"], cold)
        read: dict[SessionKey, Fixed | None] = {}
        for session, found in zip(cold, rows, strict=True):
            row = next(iter(found), None)
            read[session] = None if row is None or row.record_key is None else (row.record_key, row.partition)
        return read

    async def _write_record_keys(self, keys: SessionKeys, topic: str) -> None:
        """Store what a batch fixed and no write of its rows took, before its offsets (a batch delivered again
        decides the same), then remember it. Only the projector stores them (the indexer reads them)."""
        work = [(self._stage_p["insert_record_key"], record_key_row(fixed, topic)) for fixed in keys.untaken()]
        failed = await self._run_concurrent(work)
        if failed:
            raise StoreUnavailable(f"cassandra failed to store a session's record key: {failed[0][1]}")
        keys.remember()

    # -- driver bridge ---------------------------------------------------------------------------------------

    async def _run(self, statement: Any, params: Any) -> Any:
        try:
            return await aexecute(self._session, statement, params)
        except _TRANSIENT as exc:
            raise StoreUnavailable(f"cassandra unavailable: {type(exc).__name__}: {exc}") from exc
        except InvalidRequest as exc:
            raise StoreRefused(str(exc)) from exc
        except DriverException as exc:
            raise StoreUnavailable(f"cassandra driver error: {type(exc).__name__}: {exc}") from exc

    async def _read_many(self, statement: Any, params: list[Any]) -> list[Any]:
        """The rows of ``statement`` for each of ``params``, read concurrently (``StoreUnavailable`` on a failure)."""
        if not params:
            return []
        results = await aexecute_many(self._session, [(statement, p) for p in params], self._concurrency)
        for ok, value in results:
            if not ok:
                raise StoreUnavailable(f"cassandra read failed: {type(value).__name__}: {value}") from value
        return [value for _, value in results]

    async def _stamp_orders(
        self, stamps: LatestStamps, latest_ts: Any, keys: Sequence[tuple[Partition, Any]], stamped: Sequence[datetime],
        ids: Sequence[str],
    ) -> list[int]:  # fmt: skip
        """Each event's order against its session's latest timestamp (``LatestStamps.order``: < 0 late,
        0 in the latest's millisecond and maybe published again), in log order; ``keys``: each event's
        (partition, session key), ``stamped``: its timestamp, ``ids``: its event id. Sessions ``stamps``
        does not remember are read first with ``latest_ts`` (their newest row, one query each,
        concurrently)."""
        cold = [key for key in dict.fromkeys(keys) if not stamps.knows(*key)]
        for (tp, pk), rows in zip(cold, await self._read_many(latest_ts, [pk for _, pk in cold]), strict=True):
            newest = next(iter(rows), None)
            stamps.learn(tp, pk, None if newest is None else newest.ts)
        return [stamps.order(tp, pk, ts, i) for (tp, pk), ts, i in zip(keys, stamped, ids, strict=True)]

    async def _run_concurrent(self, work: Iterable[tuple[Any, Any]]) -> list[tuple[int, BaseException]]:
        """Run ``work`` with bounded concurrency; returns the failures as ``(position, exception)``.

        A statement that failed for want of a host raises ``StoreUnavailable``
        (an outage: the caller's batch is retried); other failures are returned.
        """
        results = await aexecute_many(self._session, list(work), self._concurrency)
        failures = [(i, value) for i, (ok, value) in enumerate(results) if not ok]
        for _, exc in failures:
            if isinstance(exc, _TRANSIENT):
                raise StoreUnavailable(f"cassandra unavailable: {type(exc).__name__}: {exc}") from exc
        return failures
