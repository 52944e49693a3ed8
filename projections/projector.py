"""The projector: Kafka records in, Cassandra rows out, offsets stored after the rows.

Guarantees (the Kafka adapter in ``projections.kafka_runner`` relies on them):

* **Idempotent rows.** Every write is an upsert keyed by a natural id (event
  id, tool call id, summary version, session) or a version-guarded LWT, so
  applying a record twice leaves the same rows as applying it once.
* **Offsets after rows.** ``project`` stores ``next_offset`` per partition in
  ``projector_offsets`` only after every row of the batch is durable. A crash
  (even SIGKILL) before that re-delivers the batch, which changes nothing
  (idempotence); a crash after it skips the batch, which was fully written.
  A logged multi-partition batch would give the same outcome at a higher
  price (batchlog, batch-size limits that 50 KB tool results would break),
  so the rows go out as concurrent *unlogged single-partition* batches
  instead (one mutation per session or tenant partition, see ``_write_events``).
* **Order where it matters.** ``delete_session`` is a barrier: the writes
  before it complete, then the session is deleted, then later writes run.
  Summaries never go backwards: ``summaries_latest`` is only written with
  ``IF NOT EXISTS`` / ``IF version < ?`` (see ``_write_latest``).
* **Epochs** (``schemas.epochs``). Every summary gets its history row (epoch 0
  in ``summaries_history``, others in ``summaries_epoch_history``); the
  outputs of replays (``<summaries>.replay-*``, when consumed) only that.
  ``summaries_latest`` holds the heads of the epoch each session is served
  from: a live summary before the session's last switch (``served_since``)
  no longer moves it, and an ``epoch_adopted`` record, a barrier like a
  delete, replaces every row of the session at once (``_adopt``).
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from cassandra import DriverException, InvalidRequest, RequestExecutionException
from cassandra.cluster import NoHostAvailable, Session
from cassandra.query import BatchStatement, BatchType, PreparedStatement
from pydantic import ValidationError

from projections import statements as q
from projections.cassandra_session import aexecute
from projections.embedding import MAX_EMBED_CHARS, Embedder
from projections.errors import StoreUnavailable
from projections.rows import (
    TokenCounter,
    estimate_tokens,
    event_rows,
    summary_history_row,
    summary_history_target,
    summary_latest_values,
)
from schemas import DeadLetter, DeleteSession, EpochAdopted, SessionEvent, SessionSummary, parse_event_record
from schemas.records import RecordDecodeError, json_object

log = logging.getLogger("distill.projector")

STAGE = "project"
_TRANSIENT = (NoHostAvailable, RequestExecutionException, OSError, TimeoutError)


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
    """Where the projector stands on one partition: the next offset to project and the log end it saw."""

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


@dataclass(frozen=True)
class _Event:
    record: SourceRecord
    event: SessionEvent


@dataclass(frozen=True)
class _Delete:
    record: SourceRecord
    command: DeleteSession


@dataclass(frozen=True)
class _Summary:
    record: SourceRecord
    summary: SessionSummary
    live: bool
    """From the summaries topic (may become the latest); else a replay's output (history only)."""


@dataclass(frozen=True)
class _Adopt:
    record: SourceRecord
    adoption: EpochAdopted


@dataclass
class _Batch:
    """Statements of one partition written together: ``(statement, params, index of the event)``."""

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


DeadLetterSink = Callable[[DeadLetter], Awaitable[None]]


def dead_letter(record: SourceRecord, exc: BaseException, reason: str | None = None) -> DeadLetter:
    """A ``DeadLetter`` for ``record`` rejected with ``exc``."""
    return DeadLetter(
        source_topic=record.topic,
        source_partition=record.partition,
        source_offset=record.offset,
        key_b64=base64.b64encode(record.key).decode() if record.key is not None else None,
        value_b64=base64.b64encode(record.value or b"").decode(),
        error_class=type(exc).__name__,
        reason=(reason or str(exc))[:2000],
        stage=STAGE,
        failed_at=datetime.now(UTC),
    )


def parse_summary_record(raw: bytes | None) -> SessionSummary | EpochAdopted | None:
    """A summary or an epoch switch, or ``None`` for the other records of the summaries topic
    (``summary_failure``, ``summary_reply``: answers to waiting requests, never a new version)."""
    if raw is None:
        raise RecordDecodeError("empty record value")
    data = json_object(raw)
    kind = data.get("type", "summary")
    if kind in ("summary_failure", "summary_reply"):
        return None
    if kind == "epoch_adopted":
        return EpochAdopted.model_validate(data)
    if kind != "summary":
        raise RecordDecodeError(f"unknown record type {kind!r} on the summaries topic")
    return SessionSummary.model_validate(data)


def replay_topic_prefix(summaries_topic: str) -> str:
    """Replay outputs are ``<summaries>.replay-<RUN>`` (``streams.app.factory.replay_topics``)."""
    return f"{summaries_topic}.replay-"


class Projector:
    """Applies batches of consumed records to Cassandra. One instance per process; not thread-safe.

    ``count_tokens`` is injected by the composition root (projections may not
    import the token counter of ``streams``); ``embedder``, when given, adds a
    vector per recall document for semantic search.
    """

    def __init__(
        self,
        session: Session,
        keyspace: str,
        *,
        events_topic: str,
        summaries_topic: str,
        consumer_group: str,
        count_tokens: TokenCounter | None = None,
        embedder: Embedder | None = None,
        concurrency: int = 32,
        batch_statements: int = 64,
        batch_bytes: int = 512 * 1024,
        pipeline_events: int = 500,
    ) -> None:
        self._session = session
        self._ks = keyspace
        self.events_topic = events_topic
        self.summaries_topic = summaries_topic
        self.consumer_group = consumer_group
        self._count = count_tokens or estimate_tokens
        self._embedder = embedder
        self._concurrency = concurrency
        self.batch_statements = batch_statements
        self.batch_bytes = batch_bytes
        self.pipeline_events = pipeline_events
        self._p = self._prepare()

    def _prepare(self) -> dict[str, PreparedStatement]:
        names = {
            "event": q.INSERT_EVENT, "event_id": q.INSERT_EVENT_ID, "tool_call": q.UPSERT_TOOL_CALL,
            "tool_result": q.UPSERT_TOOL_RESULT, "recall": q.INSERT_RECALL, "recall_chunk": q.INSERT_RECALL_CHUNK,
            "history": q.INSERT_SUMMARY_HISTORY,
            "latest_insert": q.INSERT_SUMMARY_LATEST, "latest_update": q.UPDATE_SUMMARY_LATEST,
            "epoch_history": q.INSERT_SUMMARY_EPOCH_HISTORY, "served": q.SELECT_SERVED,
            "serve_epoch": q.SERVE_EPOCH, "latest_put": q.PUT_SUMMARY_LATEST,
            "latest_delete": q.DELETE_SUMMARY_LATEST, "adoption": q.INSERT_ADOPTION,
            "select_deleted": q.SELECT_DELETED, "insert_deleted": q.INSERT_DELETED,
            "save_offset": q.SAVE_OFFSET, "load_offsets": q.LOAD_OFFSETS, "turn": q.INSERT_TURN,
            "session_source": q.UPSERT_SESSION_SOURCE, "progress": q.SAVE_PROGRESS,
            "progress_caught_up": q.SAVE_PROGRESS_CAUGHT_UP,
        }  # fmt: skip
        out = {name: self._session.prepare(cql.format(ks=self._ks)) for name, cql in names.items()}
        for table in q.SESSION_TABLES:
            out[f"delete_{table}"] = self._session.prepare(q.DELETE_SESSION_PARTITION.format(ks=self._ks, table=table))
        out["delete_recall"] = self._session.prepare(
            f"DELETE FROM {self._ks}.recall_docs WHERE app_name = ? AND user_id = ? AND session_id = ?"
        )
        out["delete_recall_chunks"] = self._session.prepare(
            f"DELETE FROM {self._ks}.recall_chunks WHERE app_name = ? AND user_id = ? AND session_id = ?"
        )
        if self._embedder is not None:
            dims = self._embedder.dimensions
            for ddl in q.vector_ddl(self._ks, dims):
                self._session.execute(ddl, timeout=60)
            out["vector"] = self._session.prepare(q.insert_vector(self._ks, dims))
            out["delete_vectors"] = self._session.prepare(
                f"DELETE FROM {self._ks}.{q.vector_table(dims)} WHERE app_name = ? AND user_id = ? AND session_id = ?"
            )
        return out

    # -- offsets ---------------------------------------------------------------------------------------------

    async def load_offsets(self) -> dict[tuple[str, int], int]:
        """The stored ``next_offset`` of every ``(topic, partition)`` of this consumer group."""
        rows = await self._run(self._p["load_offsets"], (self.consumer_group,))
        return {(r.topic, r.partition): r.next_offset for r in rows}

    async def _save_offsets(self, offsets: dict[tuple[str, int], int]) -> None:
        # One partition (the consumer group): a logged batch here is cheap and atomic.
        batch = BatchStatement(batch_type=BatchType.UNLOGGED)
        for (topic, partition), offset in sorted(offsets.items()):
            batch.add(self._p["save_offset"], (self.consumer_group, topic, partition, offset))
        await self._run(batch, None)

    async def save_progress(self, progress: Iterable[PartitionProgress], now: datetime | None = None) -> None:
        """Write the heartbeat row of each partition (``projector_progress``), read as ``projection_lag``.

        ``caught_up_at`` is set only when the partition has nothing left to
        project, so "seconds since caught up" is what a reader can act on.
        """
        at = now or datetime.now(UTC)
        work: list[tuple[Any, Any]] = []
        for pp in progress:
            end = max(pp.log_end_offset, pp.next_offset)
            if pp.next_offset >= end:
                work.append((self._p["progress_caught_up"], (pp.next_offset, end, at, at, pp.topic, pp.partition,
                                                             self.consumer_group)))  # fmt: skip
            else:
                work.append((self._p["progress"], (pp.next_offset, end, at, pp.topic, pp.partition,
                                                   self.consumer_group)))  # fmt: skip
        failed = await self._run_concurrent(work)
        if failed:
            raise StoreUnavailable(f"cassandra progress write failed: {failed[0][1]}")

    # -- the batch -------------------------------------------------------------------------------------------

    async def project(
        self,
        records: Sequence[SourceRecord],
        dead_letters: DeadLetterSink,
        *,
        save_offsets: Callable[[tuple[str, int]], bool] = lambda tp: True,
    ) -> BatchOutcome:
        """Write ``records`` (in consumed order), publish rejects to ``dead_letters``, then store offsets.

        ``save_offsets`` filters which partitions' offsets are stored (the
        adapter passes "still assigned to me"). Raises ``StoreUnavailable``
        when Cassandra fails; nothing is then stored for the batch, so it can
        simply be retried.
        """
        outcome = BatchOutcome()
        segment: list[_Event | _Summary] = []
        for record in records:
            key = (record.topic, record.partition)
            outcome.offsets[key] = max(outcome.offsets.get(key, 0), record.offset + 1)
            try:
                item = self._parse(record)
            except (RecordDecodeError, ValidationError) as exc:
                outcome.dead_letters.append(dead_letter(record, exc))
                continue
            if item is None:
                outcome.ignored += 1
            elif isinstance(item, _Delete):
                await self._flush(segment, outcome)
                segment = []
                await self._delete(item)
                outcome.deletes += 1
            elif isinstance(item, _Adopt):
                await self._flush(segment, outcome)
                segment = []
                outcome.adoptions += await self._adopt(item)
            else:
                segment.append(item)
        await self._flush(segment, outcome)
        for letter in outcome.dead_letters:
            await dead_letters(letter)
        kept = {tp: off for tp, off in outcome.offsets.items() if save_offsets(tp)}
        if kept:
            await self._save_offsets(kept)
        return outcome

    def _parse(self, record: SourceRecord) -> _Event | _Delete | _Summary | _Adopt | None:
        live = record.topic == self.summaries_topic
        if live or record.topic.startswith(replay_topic_prefix(self.summaries_topic)):
            parsed_summary = parse_summary_record(record.value)
            if isinstance(parsed_summary, SessionSummary):
                return _Summary(record, parsed_summary, live)
            if isinstance(parsed_summary, EpochAdopted) and live:
                return _Adopt(record, parsed_summary)
            return None
        if record.value is None:
            raise RecordDecodeError("empty record value")
        parsed = parse_event_record(record.value)
        if isinstance(parsed, SessionEvent):
            return _Event(record, parsed)
        if isinstance(parsed, DeleteSession):
            return _Delete(record, parsed)
        return None  # summarize commands are the worker's business

    async def _flush(self, items: list[_Event | _Summary], outcome: BatchOutcome) -> None:
        events = [i for i in items if isinstance(i, _Event)]
        summaries = [i for i in items if isinstance(i, _Summary)]
        if events:
            await self._write_events(events, outcome)
        if summaries:
            await self._write_summaries(summaries, outcome)

    async def _write_events(self, items: list[_Event], outcome: BatchOutcome) -> None:
        """Write the rows of ``items`` as unlogged single-partition batches, run concurrently.

        The session tables share the partition key ``(app_name, user_id,
        session_id)``, so the rows of one session's events (event, event id,
        tool calls) go out as one batch = one mutation on one replica: no
        batchlog, one round trip instead of three or four per event. The
        recall documents (partition ``(app_name, user_id)``) are batched per
        tenant the same way. Batches are capped (statements and bytes) so a
        run of 50 KB tool results stays a modest mutation. A batch Cassandra
        rejects (``InvalidRequest``) is replayed statement by statement to
        dead-letter exactly the events at fault.

        The events are handled in chunks of ``pipeline_events``: the rows of
        the next chunk are built while the previous chunk's writes are in
        flight (at most two chunks), so the CPU work here overlaps Cassandra's.
        Every write is an idempotent upsert, so their relative order is free.
        """
        step = max(1, self.pipeline_events)
        in_flight: list[tuple[list[_Batch], asyncio.Future[Any]]] = []
        failures: list[tuple[_Batch, BaseException]] = []
        vectors: list[tuple[tuple[object, ...], str]] = []

        async def settle(batches: list[_Batch], future: asyncio.Future[Any]) -> None:
            try:
                results = await future
            except _TRANSIENT as exc:
                raise StoreUnavailable(f"cassandra unavailable: {type(exc).__name__}: {exc}") from exc
            failures.extend((batches[i], r.result_or_exc) for i, r in enumerate(results) if not r.success)

        try:
            for start in range(0, len(items), step):
                batches = self._batches(items, start, min(len(items), start + step), vectors)
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
        for index, exc in sorted(rejected.items()):
            outcome.dead_letters.append(dead_letter(items[index].record, exc, f"cassandra rejected the event: {exc}"))
        outcome.events += len(items) - len(rejected)
        if vectors and self._embedder is not None:
            await self._write_vectors(vectors)

    def _batches(
        self, items: list[_Event], start: int, stop: int, vectors: list[tuple[tuple[object, ...], str]]
    ) -> list[_Batch]:
        """The rows of ``items[start:stop]`` grouped by partition and cut into size-capped batches."""
        groups: dict[tuple[str, ...], list[tuple[Any, Any, int, int]]] = {}
        p = self._p
        for index in range(start, stop):
            item = items[index]
            ev = item.event
            rows = event_rows(ev, item.record.offset, self._count)
            pk = (ev.app_name, ev.user_id, ev.session_id)
            session_group = groups.get(pk)
            if session_group is None:
                session_group = groups[pk] = []
                source = (*pk, item.record.topic, item.record.partition)
                session_group.append((p["session_source"], source, index, 64))
            session_group.append((p["event"], rows.event, index, rows.size))
            if rows.turn is not None:
                session_group.append((p["turn"], rows.turn, index, 96))
            session_group.append((p["event_id"], rows.event_id, index, 64))
            for r in rows.tool_calls:
                session_group.append((p["tool_call"], (r[4], r[5], r[6], r[0], r[1], r[2], r[3]), index, 64))
            if rows.tool_result is not None:
                r = rows.tool_result
                session_group.append((p["tool_result"], (r[4], r[5], r[0], r[1], r[2], r[3]), index, 64))
            if rows.recall is not None:
                tenant_group = groups.setdefault((ev.app_name, ev.user_id), [])
                tenant_group.append((p["recall"], rows.recall, index, rows.recall_size))
                for chunk in rows.chunks:
                    tenant_group.append((p["recall_chunk"], chunk, index, len(str(chunk[9])) + 256))
                if rows.recall_text is not None:
                    vectors.append((rows.recall[:5], rows.recall_text))
        batches: list[_Batch] = []
        for statements in groups.values():
            current = _Batch()
            size = 0
            for stmt, params, index, row_bytes in statements:
                if current.entries and (
                    len(current.entries) >= self.batch_statements or size + row_bytes > self.batch_bytes
                ):
                    batches.append(current)
                    current, size = _Batch(), 0
                current.entries.append((stmt, params, index))
                size += row_bytes
            batches.append(current)
        return batches

    async def _write_vectors(self, docs: list[tuple[tuple[object, ...], str]]) -> None:
        assert self._embedder is not None
        try:
            embeddings = await self._embedder.embed([text[:MAX_EMBED_CHARS] for _, text in docs])
        except Exception as exc:  # an embedder outage must not stall projection: lexical search still works
            log.warning("embedder failed, %d documents stored without vectors: %s", len(docs), exc)
            return
        work = [(self._p["vector"], (*key, vec)) for (key, _), vec in zip(docs, embeddings, strict=True)]
        failed = await self._run_concurrent(work)
        if failed:
            raise StoreUnavailable(f"cassandra vector write failed: {failed[0][1]}")

    async def _write_summaries(self, summaries: list[_Summary], outcome: BatchOutcome) -> None:
        by_key: dict[tuple[str, str, str, str], list[_Summary]] = {}
        for item in summaries:
            s = item.summary
            by_key.setdefault((s.app_name, s.user_id, s.session_id, s.filter_key), []).append(item)
        served: dict[tuple[str, str, str], asyncio.Future[tuple[int, int | None]]] = {}

        def served_of(s: SessionSummary) -> asyncio.Future[tuple[int, int | None]]:
            # One read per session per flush: a switch is a barrier, so it cannot change meanwhile.
            pk = (s.app_name, s.user_id, s.session_id)
            if pk not in served:
                served[pk] = asyncio.ensure_future(self._served(pk))
            return served[pk]

        async def one_key(items: list[_Summary]) -> None:
            for item in items:  # sequential per key, so two versions of one key never race each other
                s = item.summary
                if await self._deleted_after(s):
                    outcome.stale_summaries += 1
                    continue
                await self._run(self._p[summary_history_target(s)], summary_history_row(s))
                if not item.live:
                    outcome.epoch_summaries += 1
                    continue
                epoch, since = await served_of(s)
                if s.epoch != epoch or (since is not None and item.record.offset < since):
                    outcome.stale_summaries += 1  # a line the session has left
                elif await self._write_latest(s):
                    outcome.summaries += 1
                else:
                    outcome.stale_summaries += 1

        await asyncio.gather(*(one_key(v) for v in by_key.values()))

    async def _served(self, pk: tuple[str, str, str]) -> tuple[int, int | None]:
        """The session's served epoch and the offset of the switch to it (``(0, None)``: never switched)."""
        row = next(iter(await self._run(self._p["served"], pk)), None)
        if row is None:
            return 0, None
        return (row.served_epoch or 0), row.served_since

    async def _adopt(self, item: _Adopt) -> int:
        """Serve the session from the switch's epoch: one conditional single-partition batch.

        The batch replaces every ``summaries_latest`` row of the session (the
        adopted heads; the keys the epoch has no summary for are deleted) and
        sets ``served_epoch`` / ``served_since``, so a reader never sees two
        epochs mixed. It is conditioned on ``served_since`` being what was
        read: a switch at or before the applied one (delivered again) is
        skipped, a concurrent one is read again. The heads also get their
        history rows, and the switch its ``summary_adoptions`` row. Returns 1
        when applied.
        """
        a = item.adoption
        pk = (a.app_name, a.user_id, a.session_id)
        offset = item.record.offset
        if await self._deleted_at_or_after(pk, a.created_at):
            return 0
        for head in a.heads:
            s = head.summary
            await self._run(self._p[summary_history_target(s)], summary_history_row(s))
        applied = 0
        for _ in range(8):
            rows = list(await self._run(self._p["served"], pk))
            since = rows[0].served_since if rows else None
            if since is not None and since >= offset:
                break
            batch = BatchStatement(batch_type=BatchType.UNLOGGED)
            batch.add(self._p["serve_epoch"], (a.epoch, offset, *pk, since))
            kept = set()
            for head in a.heads:
                s = head.summary
                kept.add(s.filter_key)
                batch.add(self._p["latest_put"], (*pk, s.filter_key, *summary_latest_values(s)))
            for row in rows:
                if row.filter_key not in kept:
                    batch.add(self._p["latest_delete"], (*pk, row.filter_key))
            result = next(iter(await self._run(batch, None)))
            if result.applied:
                applied = 1
                break
        else:
            raise StoreUnavailable(f"summaries_latest of {pk} kept switching under the projector")
        await self._run(self._p["adoption"], (
            *pk, offset, item.record.topic, item.record.partition, a.epoch, a.previous_epoch, a.command_id,
            a.caught_up, len(a.heads), a.source, a.created_at))  # fmt: skip
        return applied

    async def _deleted_at_or_after(self, pk: tuple[str, str, str], created_at: datetime) -> bool:
        rows = await self._run(self._p["select_deleted"], pk)
        row = next(iter(rows), None)
        return row is not None and row.deleted_at is not None and created_at <= row.deleted_at.replace(tzinfo=UTC)

    async def _deleted_after(self, s: SessionSummary) -> bool:
        rows = await self._run(self._p["select_deleted"], (s.app_name, s.user_id, s.session_id))
        row = next(iter(rows), None)
        if row is None or row.deleted_at is None:
            return False
        deleted_at = row.deleted_at.replace(tzinfo=UTC)
        return bool(s.created_at <= deleted_at)

    async def _write_latest(self, s: SessionSummary) -> bool:
        """Make ``s`` the latest summary of its key unless an equal or newer version is there.

        LWT, not read-then-write: during a rebalance two projectors may briefly
        both hold a partition, and Paxos makes the version comparison atomic.
        Summaries are rare (one per many events), so its extra round trips are
        affordable. Returns whether ``s`` became the latest.
        """
        key = (s.app_name, s.user_id, s.session_id, s.filter_key)
        values = summary_latest_values(s)
        for _ in range(8):
            rows = await self._run(self._p["latest_insert"], (*key, *values))
            row = next(iter(rows))
            if row.applied:
                return True
            if row.version is not None and row.version >= s.version:
                return False
            rows = await self._run(self._p["latest_update"], (*values, *key, s.version))
            row = next(iter(rows))
            if row.applied:
                return True
            if row.version is not None and row.version >= s.version:
                return False
        raise StoreUnavailable(f"summaries_latest for {key} kept changing under the projector")

    async def _delete(self, item: _Delete) -> None:
        c = item.command
        pk = (c.app_name, c.user_id, c.session_id)
        deleted_at = (
            datetime.fromtimestamp(item.record.timestamp_ms / 1000, UTC)
            if item.record.timestamp_ms
            else (datetime.now(UTC))
        )
        await self._run(self._p["insert_deleted"], (*pk, deleted_at))
        work: list[tuple[Any, Any]] = [(self._p[f"delete_{t}"], pk) for t in q.SESSION_TABLES]
        work.append((self._p["delete_recall"], pk))
        work.append((self._p["delete_recall_chunks"], pk))
        if "delete_vectors" in self._p:
            work.append((self._p["delete_vectors"], pk))
        failed = await self._run_concurrent(work)
        if failed:
            raise StoreUnavailable(f"cassandra delete failed: {failed[0][1]}")

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
        retried like ``NoHostAvailable``, not a crash of the projector.
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
