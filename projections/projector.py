"""The projector: Kafka records in, the rows the next prompt needs out, offsets stored after the rows.

This is the critical path: events, event ids, turns, tool calls and results,
late events (``projections.late_events``), session sources, summaries and the
hidden-history windows (``summaries_history``), deletions. The recall index
of ``session_search`` is *not* written here: the indexer
(``projections.indexer``) builds it from the same events topic under its own
consumer group, so tokenizing and the SAI token index (the dominant cost per
event) never hold up what a prompt reads.

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
  so the rows go out as concurrent *unlogged* batches instead, each of up to
  ten session partitions that share their replicas (``stage.cut_batches``):
  the coordinator is a replica of all of them and applies one mutation per
  partition, and the driver, whose cost is mostly per message, sends a
  batch of up to ``batch_statements`` (128) rows in one.
* **Order where it matters.** ``delete_session`` is a barrier: the writes
  before it complete, then the session is deleted (but for the epoch it is
  served from, which the worker keeps), then later writes run.
  The deletion marker records where the command sits in the events topic
  (partition, offset), which is the indexer's barrier: it never indexes an
  event of a session that a later deletion already removed. The projector
  also removes the session's recall rows at once (stamped with the command's
  time, so rows a faster indexer wrote for events *after* the deletion stay),
  so search forgets the session as soon as the prompt does.
  Summaries never go backwards: ``summaries_latest`` is only written with
  ``IF NOT EXISTS`` / ``IF version < ?`` (see ``_write_latest``).
* **Epochs** (``schemas.epochs``). Every summary gets its history row (epoch 0
  in ``summaries_history``, others in ``summaries_epoch_history``); the
  outputs of replays (``<summaries>.replay-*``, when consumed) only that.
  ``summaries_latest`` holds the heads of the epoch each session is served
  from: a live summary before the session's last switch (``served_since``)
  no longer moves it, and an ``epoch_adopted`` record, a barrier like a
  delete, replaces every row of the session at once (``_adopt``).
* **A refused record does not stall its partition.** A summary, delete or
  epoch switch Cassandra refuses as invalid (``StoreRefused``: a key over
  64 KiB) goes to the dead letters with the reason, and the batch goes on;
  an event the same way (``_write_events``); one refused head of a switch
  the same way, the session switching with the others (``_adopt``). Only an
  unavailable store holds the batch for a retry.
* **What the worker refuses is not stored.** A record over the size limit,
  one that does not decode, and one whose Kafka key or partition is not its
  session's (``schemas.record_keys``, judged in log order by
  ``projections.session_keys``), and one whose event id the session's log
  already holds with other content (``schemas.event_ids``, the first digest of
  each id kept in ``event_ids``) are dead-lettered with the worker's class and
  reason: stored, it would show in the prompt while no summary holds it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cassandra import DriverException, InvalidRequest
from cassandra.cluster import Session
from cassandra.query import BatchStatement, BatchType, PreparedStatement
from pydantic import ValidationError

from projections import statements as q
from projections.binding import RowBinder
from projections.boundary import Deletion, outlived_by_deletion
from projections.cassandra_paging import afetch_all
from projections.errors import StoreRefused, StoreUnavailable
from projections.late_events import DEFAULT_REMEMBERED_SESSIONS, LatestStamps, Placement, place_late
from projections.rows import (
    TokenCounter,
    estimate_tokens,
    event_rows,
    late_row,
    summary_history_row,
    summary_history_target,
    summary_latest_values,
)
from projections.session_keys import KnownKeys, SessionKeys
from projections.stage import (
    PROJECT_STAGE,
    Batch,
    BatchOutcome,
    CassandraStage,
    CommandItem,
    DeadLetterSink,
    DeleteItem,
    EventItem,
    PartitionProgress,
    Row,
    SourceRecord,
    dead_letter,
    parse_session_record,
    record_key_row,
)
from schemas import EpochAdopted, SessionEvent, SessionKey, SessionSummary
from schemas.event_ids import DEFAULT_REMEMBERED_IDS, FirstDigests
from schemas.headers import EVENTS_OFFSET, header_int
from schemas.records import RecordDecodeError, json_object, validation_reason
from schemas.storable import refuse_unstorable

log = logging.getLogger("distill.projector")

STAGE = PROJECT_STAGE

__all__ = [
    "STAGE", "BatchOutcome", "DeadLetterSink", "PartitionProgress", "Projector", "SourceRecord", "dead_letter",
    "parse_summary_record", "replay_topic_prefix",
]  # fmt: skip


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


_Item = EventItem | DeleteItem | CommandItem | _Summary | _Adopt


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


class Projector(CassandraStage):
    """Applies batches of consumed records to the critical-path tables. One instance per process; not thread-safe.

    ``count_tokens`` is injected by the composition root (projections may not
    import the token counter of ``streams``). The recall index is the
    indexer's (``projections.indexer.RecallIndexer``).
    """

    STAGE = STAGE

    def __init__(
        self,
        session: Session,
        keyspace: str,
        *,
        events_topic: str,
        summaries_topic: str,
        consumer_group: str,
        count_tokens: TokenCounter | None = None,
        concurrency: int = 32,
        batch_statements: int = 128,
        batch_bytes: int = 512 * 1024,
        pipeline_events: int = 2000,
        remembered_sessions: int = DEFAULT_REMEMBERED_SESSIONS,
        max_record_bytes: int | None = None,
        remembered_ids: int = DEFAULT_REMEMBERED_IDS,
    ) -> None:
        """``remembered_sessions``: sessions whose latest timestamp is kept in memory
        (``projections.late_events.LatestStamps``); a session not remembered costs one row read.
        ``max_record_bytes``: events-topic records over it are dead-lettered (``OversizedRecord``), as the
        worker refuses them (``None``: any size). ``remembered_ids``: event ids whose first digest is kept in
        memory (``schemas.event_ids.FirstDigests``); a session not remembered costs one read of its ids."""
        super().__init__(session, keyspace, consumer_group=consumer_group, concurrency=concurrency,
                         batch_statements=batch_statements, batch_bytes=batch_bytes,
                         pipeline_events=pipeline_events)  # fmt: skip
        self.events_topic = events_topic
        self.summaries_topic = summaries_topic
        self._count = count_tokens or estimate_tokens
        self._stamps = LatestStamps(remembered_sessions)
        self._keys = KnownKeys(remembered_sessions)
        self._digests = FirstDigests(remembered_ids)
        self.max_record_bytes = max_record_bytes
        self._p = self._prepare()

    @property
    def topics(self) -> tuple[str, ...]:
        return (self.events_topic, self.summaries_topic)

    def _prepare(self) -> dict[str, PreparedStatement]:
        names = {
            "event": q.INSERT_EVENT, "event_id": q.INSERT_EVENT_ID, "tool_call": q.UPSERT_TOOL_CALL,
            "tool_result": q.UPSERT_TOOL_RESULT, "history": q.INSERT_SUMMARY_HISTORY,
            "latest_insert": q.INSERT_SUMMARY_LATEST, "latest_update": q.UPDATE_SUMMARY_LATEST,
            "epoch_history": q.INSERT_SUMMARY_EPOCH_HISTORY, "served": q.SELECT_SERVED,
            "serve_epoch": q.SERVE_EPOCH, "latest_put": q.PUT_SUMMARY_LATEST,
            "latest_delete": q.DELETE_SUMMARY_LATEST, "adoption": q.INSERT_ADOPTION,
            "select_deleted": q.SELECT_DELETED, "insert_deleted": q.INSERT_DELETED, "turn": q.INSERT_TURN,
            "session_source": q.UPSERT_SESSION_SOURCE, "late": q.INSERT_LATE_EVENT, "latest_ts": q.SELECT_LATEST_TS,
            "event_position": q.SELECT_EVENT_POSITION, "call_event": q.INSERT_TOOL_CALL_EVENT,
        }  # fmt: skip
        out = {name: self._session.prepare(cql.format(ks=self._ks)) for name, cql in names.items()}
        self._bind_record_key = RowBinder(self._stage_p["insert_record_key"])
        self._bind = {name: RowBinder(out[name]) for name in ("event", "event_id", "tool_call", "tool_result", "turn",
                                                               "session_source", "late", "call_event")}  # fmt: skip
        for table in q.SESSION_TABLES:
            # The served epoch outlives a deletion: the worker keeps serving the session from it.
            cql = q.DELETE_SESSION_ROWS if table == "summaries_latest" else q.DELETE_SESSION_PARTITION
            out[f"delete_{table}"] = self._session.prepare(cql.format(ks=self._ks, table=table))
        for table in q.RECALL_TABLES:
            out[f"delete_{table}"] = self._session.prepare(q.DELETE_RECALL_AT.format(ks=self._ks, table=table))
            out[f"delete_event_{table}"] = self._session.prepare(q.DELETE_RECALL_EVENT.format(ks=self._ks, table=table))
        for table in _SEQ_TABLES:
            out[f"seqs_{table}"] = self._session.prepare(q.SELECT_RECALL_SEQS.format(ks=self._ks, table=table))
        return out

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
        parsed, keys = await self._parse_and_judge(records, outcome, self._parse)
        segment: list[EventItem | _Summary] = []
        for record, item in parsed:
            if isinstance(item, RecordDecodeError | ValidationError):
                # A RecordKeyError too: the worker refuses it with this reason (and dead-letters it too), so it
                # is never in a summary.
                reason = validation_reason(item) if isinstance(item, ValidationError) else None
                outcome.dead_letters.append(dead_letter(record, item, reason, stage=STAGE))
                continue
            if item is None or isinstance(item, CommandItem):
                outcome.ignored += 1
            elif isinstance(item, DeleteItem):
                await self._flush(segment, outcome, keys)
                segment = []
                if await self._refusable(item.record, self._delete(item), "delete", outcome):
                    outcome.deletes += 1
            elif isinstance(item, _Adopt):
                await self._flush(segment, outcome, keys)
                segment = []
                what = f"epoch switch of session {_named(item.adoption.session_key)}"
                outcome.adoptions += await self._refusable(item.record, self._adopt(item, outcome), what, outcome)
            else:
                segment.append(item)
        await self._flush(segment, outcome, keys)
        await self._write_record_keys(keys, self.events_topic)
        for letter in outcome.dead_letters:
            await dead_letters(letter)
        kept = {tp: off for tp, off in outcome.offsets.items() if save_offsets(tp)}
        if kept:
            await self._save_offsets(kept)
        return outcome

    def _parse(self, record: SourceRecord) -> _Item | None:
        """A record of the summaries topics, or of the events topic as both stages parse it."""
        live = record.topic == self.summaries_topic
        if live or record.topic.startswith(replay_topic_prefix(self.summaries_topic)):
            refuse_unstorable(record.value or b"")
            parsed_summary = parse_summary_record(record.value)
            if isinstance(parsed_summary, SessionSummary):
                return _Summary(record, parsed_summary, live)
            if isinstance(parsed_summary, EpochAdopted) and live:
                return _Adopt(record, parsed_summary)
            return None
        return parse_session_record(record, self.max_record_bytes)

    @staticmethod
    async def _refusable(record: SourceRecord, write: Awaitable[int | None], what: str, outcome: BatchOutcome) -> int:
        """Await ``write`` for ``record``: 1 (or its count) when done, 0 when Cassandra refused it.

        A refused record can never be written (``StoreRefused``: retrying gets the
        same answer), so it goes to the dead letters with the reason and the
        partition moves on, instead of the batch being retried forever.
        """
        try:
            done = await write
        except StoreRefused as exc:
            outcome.dead_letters.append(dead_letter(record, exc, f"cassandra refused the {what}: {exc}", stage=STAGE))
            return 0
        return 1 if done is None else done

    async def _flush(self, items: list[EventItem | _Summary], outcome: BatchOutcome, keys: SessionKeys) -> None:
        events = [i for i in items if isinstance(i, EventItem)]
        summaries = [i for i in items if isinstance(i, _Summary)]
        if events:
            await self._write_events(events, outcome, keys)
        if summaries:
            await self._write_summaries(summaries, outcome)

    async def _write_events(self, items: list[EventItem], outcome: BatchOutcome, keys: SessionKeys) -> None:
        """Write the rows of ``items`` as unlogged batches, run concurrently.

        The session tables share the partition key ``(app_name, user_id,
        session_id)``, so the rows of one session's events (event, event id,
        turn, tool calls) are one mutation on its replicas; sessions sharing
        their replicas share a batch (``CassandraStage._cut``): no batchlog,
        one round trip for up to 128 rows. Batches are capped (statements,
        bytes, partitions) so a run of 50 KB tool results stays a modest
        mutation. A batch Cassandra rejects (``InvalidRequest``) is replayed
        statement by statement to dead-letter exactly the events at fault
        (``_write_pipelined``).
        """
        placements = await self._place(items)
        rejected = await self._write_pipelined(len(items), lambda a, b: self._batches(items, placements, keys, a, b))
        for index, exc in sorted(rejected.items()):
            outcome.dead_letters.append(
                dead_letter(items[index].record, exc, f"cassandra rejected the event: {exc}", stage=STAGE)
            )
        outcome.events += len(items) - len(rejected)

    async def _place(self, items: list[EventItem]) -> dict[int, Placement]:
        """The events of ``items`` (in log order) not written plainly at their record's offset — late, or
        published again —, by index (most events have no entry).

        See ``projections.late_events``: sessions not remembered are read first
        (their newest timestamp, one row each, concurrently); the first record of
        a late event, or of one stamped in the millisecond of its session's latest
        that may be published again (``LatestStamps.order``), is looked up (one row
        each, concurrently: such events are few), so an event published again keeps
        its place and is not late again.
        """
        keys = [((i.record.topic, i.record.partition), _pk(i.event)) for i in items]
        orders = await self._stamp_orders(self._stamps, self._p["latest_ts"], keys, [i.event.timestamp for i in items],
                                          [i.event.event_id for i in items])  # fmt: skip
        late = [n for n, o in enumerate(orders) if o < 0]
        ties = [n for n, o in enumerate(orders) if o == 0]
        if not late and not ties:
            return {}
        looked = [*late, *ties]
        found = await self._read_many(self._p["event_position"], [(*keys[n][1], items[n].event.event_id)
                                                                  for n in looked])  # fmt: skip
        stored = {n: (row.ts, row.seq) for n, rows in zip(looked, found, strict=True)
                  for row in rows if row.ts is not None and row.seq is not None}  # fmt: skip
        records = [((keys[n][1], i.event.event_id), i.event.timestamp, i.record.offset) for n, i in enumerate(items)]
        return place_late(records, late, stored, ties)

    def _batches(
        self, items: list[EventItem], placements: dict[int, Placement], keys: SessionKeys, start: int, stop: int
    ) -> list[Batch]:
        """The rows of ``items[start:stop]`` grouped by session partition, then cut into batches (``_cut``); the
        key an event fixed (``keys``) goes with its rows (one partition key: no message of its own)."""
        groups: dict[tuple[str, str, str], list[Row]] = {}
        p = self._bind
        stmt_event, stmt_event_id, stmt_turn = p["event"], p["event_id"], p["turn"]
        stmt_call, stmt_result, stmt_source = p["tool_call"], p["tool_result"], p["session_source"]
        stmt_late, stmt_call_event = p["late"], p["call_event"]
        for index in range(start, stop):
            item = items[index]
            ev = item.event
            placed = placements.get(index)
            seq = item.record.offset if placed is None else placed.seq
            rows = event_rows(ev, seq, self._count, item.data, item.digest)
            pk = (ev.app_name, ev.user_id, ev.session_id)
            group = groups.get(pk)
            if group is None:
                group = groups[pk] = []
                group.append((stmt_source, (*pk, item.record.topic, item.record.partition), index, 64))
            group.append((stmt_event, rows.event, index, rows.size))
            fixed = keys.take(item.record.partition, item.record.offset)
            if fixed is not None:  # the session's first accepted record (once per session)
                group.append((self._bind_record_key, record_key_row(fixed, item.record.topic), index, 64))
            if placed is not None and placed.late:
                group.append((stmt_late, late_row(ev, seq), index, 96))
            if rows.turn is not None:
                group.append((stmt_turn, rows.turn, index, 96))
            group.append((stmt_event_id, rows.event_id, index, 64))
            for r in rows.tool_calls:
                group.append((stmt_call, (r[4], r[5], r[6], r[0], r[1], r[2], r[3]), index, 64))
            if rows.tool_result is not None:
                r = rows.tool_result
                group.append((stmt_result, (r[4], r[5], r[0], r[1], r[2], r[3]), index, 64))
            for r in rows.call_events:
                group.append((stmt_call_event, r, index, 96))
        return self._cut(groups)

    async def _write_summaries(self, summaries: list[_Summary], outcome: BatchOutcome) -> None:
        by_key: dict[tuple[str, str, str, str], list[_Summary]] = {}
        for item in summaries:
            s = item.summary
            by_key.setdefault((s.app_name, s.user_id, s.session_id, s.filter_key), []).append(item)
        served: dict[tuple[str, str, str], asyncio.Future[tuple[int, int | None]]] = {}
        deleted: dict[tuple[str, str, str], asyncio.Future[Deletion | None]] = {}

        def served_of(s: SessionSummary) -> asyncio.Future[tuple[int, int | None]]:
            # One read per session per flush: a switch is a barrier, so it cannot change meanwhile.
            pk = (s.app_name, s.user_id, s.session_id)
            if pk not in served:
                served[pk] = asyncio.ensure_future(self._served(pk))
            return served[pk]

        def deleted_of(s: SessionSummary) -> asyncio.Future[Deletion | None]:
            # Likewise for a deletion, which is a barrier too.
            pk = (s.app_name, s.user_id, s.session_id)
            if pk not in deleted:
                deleted[pk] = asyncio.ensure_future(self._deleted_at(pk))
            return deleted[pk]

        async def one(item: _Summary) -> None:
            s = item.summary
            events_offset = header_int(item.record.headers, EVENTS_OFFSET)
            if outlived_by_deletion(s.created_at, events_offset, await deleted_of(s)):
                outcome.stale_summaries += 1
                return
            await self._run(self._p[summary_history_target(s)], summary_history_row(s))
            if not item.live:
                outcome.epoch_summaries += 1
                return
            epoch, since = await served_of(s)
            if s.epoch != epoch or (since is not None and item.record.offset < since):
                outcome.stale_summaries += 1  # a line the session has left
            elif await self._write_latest(s):
                outcome.summaries += 1
            else:
                outcome.stale_summaries += 1

        async def one_key(items: list[_Summary]) -> None:
            for item in items:  # sequential per key, so two versions of one key never race each other
                await self._refusable(item.record, one(item), "summary", outcome)

        await asyncio.gather(*(one_key(v) for v in by_key.values()))

    async def _served(self, pk: tuple[str, str, str]) -> tuple[int, int | None]:
        """The session's served epoch and the offset of the switch to it (``(0, None)``: never switched)."""
        row = next(iter(await self._run(self._p["served"], pk)), None)
        if row is None:
            return 0, None
        return (row.served_epoch or 0), row.served_since

    async def _adopt(self, item: _Adopt, outcome: BatchOutcome) -> int:
        """Serve the session from the switch's epoch: one conditional single-partition batch.

        The batch replaces every ``summaries_latest`` row of the session (the
        adopted heads; the keys the epoch has no summary for are deleted) and
        sets ``served_epoch`` / ``served_since``, so a reader never sees two
        epochs mixed. It is conditioned on ``served_since`` being what was
        read: a switch at or before the applied one (delivered again) is
        skipped, a concurrent one is read again. The heads also get their
        history rows, and the switch its ``summary_adoptions`` row. Returns 1
        when applied.

        A deletion does not stop a switch: the worker switched the session (it
        decides switches and deletions in log order, and keeps serving the
        epoch across a deletion), and the projector reads the two topics side
        by side. A head the deletion outlives (it covers events before it,
        ``outlived_by_deletion``: a replay's head or one the session left on
        the epoch) is left out, like a live summary of the deleted history.

        A head Cassandra refuses (``StoreRefused``: a filter key over the key
        limit; its history row is written first and tells) is left out: the
        record is dead-lettered on ``outcome`` once, naming the session and every
        refused key, and the session
        switches without it (its key then has no summary in the epoch): one
        refused head neither holds back the others nor leaves the session on
        the line it left, where its next summaries would no longer be served.
        """
        a = item.adoption
        pk = (a.app_name, a.user_id, a.session_id)
        offset = item.record.offset
        deletion = await self._deleted_at(pk)
        heads = []
        refused: list[tuple[SessionSummary, StoreRefused]] = []
        for head in a.heads:
            if outlived_by_deletion(head.summary.created_at, head.events_offset, deletion):
                continue
            s = head.summary
            try:
                await self._run(self._p[summary_history_target(s)], summary_history_row(s))
            except StoreRefused as exc:
                refused.append((s, exc))
                continue
            heads.append(head)
        if refused:  # one dead letter for the record (it holds every head's text), naming every refused key
            keys = ", ".join(f"{_clipped(s.filter_key)} (version {s.version})" for s, _ in refused)
            reason = (
                f"cassandra refused {len(refused)} head(s) in the switch of session {_named(a.session_key)} to "
                f"epoch {a.epoch}, of filter key(s) {keys}; the session switched without them: {refused[0][1]}"
            )
            outcome.dead_letters.append(dead_letter(item.record, refused[0][1], reason, stage=STAGE))
        applied = 0
        for _ in range(8):
            rows = list(await self._run(self._p["served"], pk))
            since = rows[0].served_since if rows else None
            if since is not None and since >= offset:
                break
            batch = BatchStatement(batch_type=BatchType.UNLOGGED)
            batch.add(self._p["serve_epoch"], (a.epoch, offset, *pk, since))
            kept = set()
            for head in heads:
                s = head.summary
                kept.add(s.filter_key)
                batch.add(self._p["latest_put"], (*pk, s.filter_key, *summary_latest_values(s)))
            for row in rows:
                # After a deletion's range delete only the static columns remain: one row, no filter key.
                if row.filter_key is not None and row.filter_key not in kept:
                    batch.add(self._p["latest_delete"], (*pk, row.filter_key))
            result = next(iter(await self._run(batch, None)))
            if result.applied:
                applied = 1
                break
        else:
            raise StoreUnavailable(f"summaries_latest of {pk} kept switching under the projector")
        await self._run(self._p["adoption"], (
            *pk, offset, item.record.topic, item.record.partition, a.epoch, a.previous_epoch, a.command_id,
            a.caught_up, len(heads), a.source, a.created_at))  # fmt: skip
        return applied

    async def _deleted_at(self, pk: tuple[str, str, str]) -> Deletion | None:
        """The session's last deletion (``None``: never); see ``outlived_by_deletion``."""
        row = next(iter(await self._run(self._p["select_deleted"], pk)), None)
        if row is None or row.deleted_at is None:
            return None
        return Deletion(row.deleted_at.replace(tzinfo=UTC), row.deleted_offset)

    async def _write_latest(self, s: SessionSummary) -> bool:
        """Make ``s`` the latest summary of its key unless an equal or newer version is there.

        LWT, not read-then-write: during a rebalance two projectors may briefly
        both hold a partition, and Paxos makes the version comparison atomic.
        Summaries are rare (one per many events), so its extra round trips are
        affordable. Returns whether ``s`` became the latest.
        """
        key = (s.app_name, s.user_id, s.session_id, s.filter_key)
        values = summary_latest_values(s)
        # A version after the first usually finds its key's head: the update first, one transaction
        # (a Paxos round) instead of a refused insert and then the update.
        insert = s.version <= 1
        for _ in range(8):
            if insert:
                rows = await self._run(self._p["latest_insert"], (*key, *values))
                row = next(iter(rows))
                if row.applied:
                    return True
                if row.version is not None and row.version >= s.version:
                    return False
            insert = True
            rows = await self._run(self._p["latest_update"], (*values, *key, s.version))
            row = next(iter(rows))
            if row.applied:
                return True
            head = getattr(row, "version", None)  # absent or null: no head yet, insert it
            if head is not None and head >= s.version:
                return False
        raise StoreUnavailable(f"summaries_latest for {key} kept changing under the projector")

    async def _delete(self, item: DeleteItem) -> None:
        """The marker first (the indexer's barrier, and what stops a late summary), then the rows.

        The recall rows are removed with a tombstone stamped at the command's
        time (``USING TIMESTAMP``): rows written before it was published go,
        rows a faster indexer already wrote for events *after* it (the session
        started again) stay. What a lagging indexer would write for events
        before it, the marker stops (``projections.indexer``).

        The rows a lagging indexer wrote for events before it *after* it was
        published, and checked before the marker was there, outlive that
        tombstone (their write time is later): session_search found the deleted
        text until the indexer reached the command. They are read back after
        the tombstone and removed one by one (:meth:`_delete_indexed_before`).
        """
        c = item.command
        pk = (c.app_name, c.user_id, c.session_id)
        now = datetime.now(UTC)
        deleted_at = datetime.fromtimestamp(item.record.timestamp_ms / 1000, UTC) if item.record.timestamp_ms else now
        stamp_us = int(deleted_at.timestamp() * 1_000_000)
        await self._run(self._p["insert_deleted"], (*pk, deleted_at, item.record.partition, item.record.offset))
        self._stamps.forget((item.record.topic, item.record.partition), pk)
        work: list[tuple[Any, Any]] = [(self._p[f"delete_{t}"], pk) for t in q.SESSION_TABLES]
        work.extend((self._p[f"delete_{t}"], (stamp_us, *pk)) for t in q.RECALL_TABLES)
        failed = await self._run_concurrent(work)
        if failed and all(isinstance(exc, InvalidRequest) for _, exc in failed):
            raise StoreRefused(f"cassandra refused the delete: {failed[0][1]}")
        if failed:
            raise StoreUnavailable(f"cassandra delete failed: {failed[0][1]}")
        await self._delete_indexed_before(pk, item.record, deleted_at)

    async def _delete_indexed_before(
        self, pk: tuple[str, str, str], command: SourceRecord, deleted_at: datetime
    ) -> None:
        """Remove the recall rows left of events logged before the delete command ``command``.

        Read after the marker was stored: a row the indexer writes later, it removes itself (its check
        after the write sees the marker), so between the two no row of the deleted history stays.
        """
        try:
            pages = await asyncio.gather(*(afetch_all(self._session, self._p[f"seqs_{t}"], pk) for t in _SEQ_TABLES))
        except DriverException as exc:
            raise StoreUnavailable(f"cassandra read failed: {type(exc).__name__}: {exc}") from exc
        before = {(r.ts, r.event_id) for rows in pages for r in rows if _logged_before(r, command, deleted_at)}
        if not before:
            return
        work = [(self._p[f"delete_event_{t}"], (*pk, ts, event_id)) for ts, event_id in before for t in q.RECALL_TABLES]
        failed = await self._run_concurrent(work)
        if failed:
            raise StoreUnavailable(f"cassandra delete failed: {failed[0][1]}")
        log.info("removed the recall rows of %d deleted events indexed after the deletion was published", len(before),
                 extra={"topic": command.topic, "partition": command.partition, "offset": command.offset,
                        "app_name": pk[0], "session_id": pk[2]})  # fmt: skip


_SEQ_TABLES = ("recall_docs", "recall_chunks")
"""The recall tables holding each row's ``seq`` (``recall_lines`` rows go with their event's)."""


def _logged_before(row: Any, command: SourceRecord, deleted_at: datetime) -> bool:
    """Whether a recall row is of an event the delete command removed (logged before it)."""
    if row.seq is not None and command.offset is not None:
        return bool(row.seq < command.offset)  # a session's events and its commands share a partition
    return row.ts is not None and row.ts.replace(tzinfo=UTC) <= deleted_at


def _pk(event: SessionEvent) -> tuple[str, str, str]:
    return event.app_name, event.user_id, event.session_id


def _clipped(text: str, most: int = 80) -> str:
    """``text`` quoted, cut to ``most`` characters with its length named (a dead letter's reason stays short)."""
    return repr(text) if len(text) <= most else f"{text[:most]!r}… ({len(text)} characters)"


def _named(key: SessionKey) -> str:
    """``app/user/session`` for a reason, each part clipped."""
    return "/".join(part if len(part) <= 80 else _clipped(part) for part in key)
