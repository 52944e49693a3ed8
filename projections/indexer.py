"""The recall indexer: the events topic in, the ``session_search`` index out, off the projector's path.

It consumes the events topic under its own consumer group (offsets in
``projector_offsets`` like the projector's, stored only after its rows, so
it resumes exactly where its rows stop) and writes ``recall_docs``,
``recall_chunks`` and, with an embedder, the vectors. Tokenizing and the SAI
token index cost several times what the critical path costs per event
(issue 14), so they run here, where falling behind delays search by its lag
(reported as ``ContextRead.index_lag``) and never a prompt.

Deletions are a barrier for this stage too, although the two stages run at
their own pace:

* a ``delete_session`` it consumes removes the session's recall rows (and
  vectors) before anything after it is indexed;
* an event of a session that a *later* ``delete_session`` has already removed
  (the projector, running ahead, stored the deletion marker with the
  command's partition and offset) is not indexed: a lagging or restarted
  indexer never brings a deleted session back into search. The marker is
  read before the writes (to skip them) and again after them: when the
  projector's deletion landed in between, the rows just written for events
  before it are removed again. Only the indexer reaching the command itself
  is the final word; the checks keep the window closed meanwhile.

An event *published again* (the same id and timestamp at a later offset, a
producer's retry) is indexed where the log first had it, as the projector
places it (``projections.late_events``): its recall rows keep the first
record's ``seq``, so a search scoped by a summary's boundary (``current_hidden``)
sees it on the same side as the prompt does. The indexer keeps its own
:class:`~projections.late_events.LatestStamps` (a session not remembered: one
read of its newest ``recall_lines`` row) and looks up the index's own row of
such an event, since it may run ahead of the projector.

**Two stages of it** (``scope``): the later chunks of long documents are most
of the index's cost (57% of the postings of the benchmark's mix, where a
quarter of the tool results are 50 KB), and at a sustained 1,000 events/s a
2-core box cannot index everything: with one stage, everything searchable
waited behind them. So the *primary* stage (``scope="primary"``, group
``<app>-indexer``) writes every document row, context line and vector and the
first ``primary_chunks`` of ``recall_chunks`` (``rows.split_chunks``; 0 by
default), and the *deep* stage (``scope="deep"``, group ``<app>-indexer-deep``,
heartbeats ``index-deep``: ``ContextRead.deep_index_lag``) writes the rest,
at its own pace, resuming from its own offsets. ``scope="all"`` is the one
stage that writes everything.

The deep stage follows the primary and never passes it: a batch waits until
the primary stage has stored offsets past it (``primary_group``), so the
primary's rows of its events are there, and so is every deletion before them.
It also yields to it: with a ``gate`` on the primary stage's heartbeats
(``CriticalPathGate(stage=INDEX_STAGE, max_behind=DEEP_MAX_BEHIND)``, what
``distill indexer --deep`` runs with) it waits while the primary is behind
(at most the gate's 30 s a batch), so at a rate the box cannot index whole it
is the deep stage that falls behind, not what everything searchable needs.
It writes the later chunks of an event only when the primary's document row
of it is there (``recall_docs``), with that row's ``seq`` (an event published
again keeps where the primary placed it), and not when a deletion marker
covers it; after its writes it checks both again and removes what a deletion
that landed meanwhile took away. It deletes nothing on a ``delete_session``
(the primary stage removed the session's rows, later chunks included, and a
range deletion here would also take the rows of a session started again
since). And search shows a later chunk only while its document's first chunk
is in the index (``recall_search``), so the deep stage, however far behind,
never brings deleted content back into search, even between its write and
its check.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from cassandra.cluster import Session
from cassandra.query import PreparedStatement

from projections import statements as q
from projections.binding import RowBinder
from projections.critical_gate import CriticalPathGate
from projections.embedding import MAX_EMBED_CHARS, Embedder
from projections.errors import StageBehind, StoreUnavailable
from projections.late_events import DEFAULT_REMEMBERED_SESSIONS, LatestStamps, Placement, place_late
from projections.rows import (
    DEFAULT_PRIMARY_CHUNKS,
    RecallRows,
    has_later_chunks,
    recall_eligible,
    recall_rows,
    split_chunks,
)
from projections.session_keys import KnownKeys
from projections.stage import (
    DEEP_INDEX_STAGE,
    INDEX_STAGE,
    Batch,
    BatchOutcome,
    CassandraStage,
    DeadLetterSink,
    DeleteItem,
    EventItem,
    Row,
    SessionItem,
    SourceRecord,
    dead_letter,
    parse_session_record,
)
from schemas import DeleteSession, SessionEvent
from schemas.event_ids import FirstDigests

log = logging.getLogger("distill.indexer")

STAGE = INDEX_STAGE
_YIELD_EVERY = 100
"""Documents tokenized between two yields to the event loop (~10-30 ms of CPU)."""
_YIELD_EVERY_LONG = 4
"""Long documents (the deep stage's, ~1-5 ms of tokenizing each) between two yields to the event loop."""
_Session = tuple[str, str, str]
_LINE_BYTES = 256
"""About the bytes of a ``recall_lines`` row in a batch (a ~100-character line and the key)."""
IndexScope = Literal["all", "primary", "deep"]
"""What a ``RecallIndexer`` writes: everything, the primary stage's part, or the deep stage's (see the module)."""


class PrimaryBehind(StageBehind):
    """The deep stage's batch is past what the primary indexing stage has stored: retried (the consumer paused)."""


DEEP_MAX_BEHIND = 0
"""Records the primary stage may be behind on a partition before the deep stage yields to it: none. Its
heartbeat undercounts (written after each batch, against the log end its fetch saw): at a sustained
1,000 events/s it said 200-600 while the primary was 5-7 s (~1,500 records a partition) behind. With 500
the deep stage went on and the primary's lag p99 was 9.7-10.8 s; with 100, 5.8 s; with 0, 4.6 s
(bench_projections' sustained phase, quiet box). The deep stage then waits for a moment the primary has
caught up: at a rate the node cannot index whole, the deep stage is the one that falls behind."""


def primary_gate(
    session: Session, keyspace: str, *, check_s: float = 0.25, max_wait_s: float = 5.0
) -> CriticalPathGate:
    """The deep stage's gate on the primary stage (see the module): while the primary's last heartbeat on a
    batch's partition says it is behind at all (``DEEP_MAX_BEHIND``), the batch waits, and past ``max_wait_s``
    it is given back (``PrimaryBehind``: the runner holds it and tries again), never indexed regardless. The
    primary's heartbeat comes after each of its batches, which can take over 5 s while it shares the node
    with this stage: one counts as fresh for a minute (this stage cannot pass the primary anyway)."""
    return CriticalPathGate(session, keyspace, stage=INDEX_STAGE, max_behind=DEEP_MAX_BEHIND, check_s=check_s,
                            max_wait_s=max_wait_s, stale_s=60.0, behind_error=PrimaryBehind)  # fmt: skip


def deep_group_of(index_group: str) -> str:
    """The deep stage's consumer group beside the primary indexer's ``index_group``: ``<group>-deep``."""
    return f"{index_group}-deep"


def primary_group_of(deep_group: str) -> str:
    """The primary indexer's group the deep stage ``deep_group`` follows (``<group>-deep`` → ``<group>``)."""
    return deep_group.removesuffix("-deep")


@dataclass(frozen=True)
class _Marker:
    """A session's deletion marker: where its latest ``delete_session`` sits in the events topic."""

    partition: int | None
    offset: int | None
    deleted_at: datetime | None

    def covers(self, record: SourceRecord, event: SessionEvent) -> bool:
        """Whether the deletion removed ``event`` (it precedes the command in the session's partition)."""
        if self.partition is not None and self.offset is not None:
            return record.partition == self.partition and record.offset < self.offset
        # A marker from before the offsets were recorded: fall back to the times.
        return self.deleted_at is not None and event.timestamp <= self.deleted_at


class RecallIndexer(CassandraStage):
    """Builds the recall index from batches of event records. One instance per process; not thread-safe.

    ``embedder``, when given, adds a vector per recall document for semantic
    search (an embedder outage leaves documents without vectors; lexical
    search still finds them).

    The critical path first, in Cassandra too: each token is an SAI posting
    (~10 µs of Cassandra CPU), so a catching-up indexer can keep Cassandra
    busy on its own. Its writes go out as small batches (``batch_bytes``, a
    few thousand postings: tens of ms of work each) and few at a time
    (``concurrency``), so the projector's requests wait behind a handful of
    short ones at most; with a ``gate`` (``projections.critical_gate``) it
    also waits while a projector of the same partitions is behind.

    Where a posting's cost goes (a profile of the local node on the
    benchmark's mix): about 40% is SAI's memtable index (per term, a skip
    list of primary keys, each insert comparing keys down its levels), about
    20% that index's flush (each posting's key looked up again), about a
    quarter garbage collection, the row itself the rest. The postings are near
    their floor (``benchmarks/recall_postings.py``: posting each token once per
    document rather than once per chunk saves 3%), so what takes cost off is
    the node: the trie memtable, the local node's default, 13-20%. Measured
    without a clear gain (issue 14): 512 KiB batches, token hashes in a
    ``set<bigint>``, a one-column clustering key, off-heap memtables; costing
    more: smaller batches, single-row writes, and an inverted-index table of
    our own (a clustering row per posting: twice the CPU of an SAI posting).
    """

    STAGE = STAGE

    def __init__(
        self,
        session: Session,
        keyspace: str,
        *,
        events_topic: str,
        consumer_group: str,
        embedder: Embedder | None = None,
        gate: CriticalPathGate | None = None,
        concurrency: int = 4,
        batch_statements: int = 128,
        batch_bytes: int = 128 * 1024,
        pipeline_events: int = 500,
        remembered_sessions: int = DEFAULT_REMEMBERED_SESSIONS,
        scope: IndexScope = "all",
        primary_chunks: int = DEFAULT_PRIMARY_CHUNKS,
        primary_group: str | None = None,
        primary_wait_s: float = 10.0,
        primary_check_s: float = 0.2,
        max_record_bytes: int | None = None,
    ) -> None:
        """``scope``, ``primary_chunks``: see the module (both stages of one index take the same
        ``primary_chunks``). The deep stage follows ``primary_group`` (default ``primary_group_of(consumer_group)``),
        checking every ``primary_check_s`` and giving a batch up to ``primary_wait_s`` before it raises
        ``PrimaryBehind`` (retried by the runner with its backoff). ``max_record_bytes``: records over it are
        skipped (the projector dead-letters them, as the worker refuses them)."""
        if scope not in ("all", "primary", "deep"):
            raise ValueError(f"unknown index scope {scope!r}")
        super().__init__(session, keyspace, consumer_group=consumer_group, concurrency=concurrency,
                         batch_statements=batch_statements, batch_bytes=batch_bytes,
                         pipeline_events=pipeline_events)  # fmt: skip
        self.events_topic = events_topic
        self.max_record_bytes = max_record_bytes
        self.scope: IndexScope = scope
        self.primary_chunks = max(0, primary_chunks)
        if scope == "deep":
            self.STAGE = DEEP_INDEX_STAGE
            embedder = None  # vectors are the primary stage's (one per document, from its whole text)
        self.primary_group = primary_group or primary_group_of(consumer_group)
        self.primary_wait_s = primary_wait_s
        self.primary_check_s = primary_check_s
        self.waited_primary_s = 0.0
        """Seconds the deep stage spent waiting for the primary stage (for logs and benchmarks)."""
        self._stamps = LatestStamps(remembered_sessions)
        self._keys = KnownKeys(remembered_sessions)
        self._digests = FirstDigests()
        self._embedder = embedder
        self._gate = gate
        self.indexed_tokens = 0
        """Index postings written so far (tokens of every row): what the SAI index costs."""
        self._p = self._prepare()

    @property
    def topics(self) -> tuple[str, ...]:
        return (self.events_topic,)

    def _prepare(self) -> dict[str, PreparedStatement]:
        ks = self._ks
        out = {
            "recall": self._session.prepare(q.INSERT_RECALL.format(ks=ks)),
            "recall_chunk": self._session.prepare(q.INSERT_RECALL_CHUNK.format(ks=ks)),
            "recall_line": self._session.prepare(q.INSERT_RECALL_LINE.format(ks=ks)),
            "markers": self._session.prepare(q.SELECT_DELETED_OFFSETS.format(ks=ks)),
            "latest_ts": self._session.prepare(q.SELECT_LATEST_LINE_TS.format(ks=ks)),
            "seq": self._session.prepare(q.SELECT_RECALL_SEQ.format(ks=ks)),
        }
        self._bind_doc, self._bind_chunk = RowBinder(out["recall"]), RowBinder(out["recall_chunk"])
        self._bind_line = RowBinder(out["recall_line"])
        tables = list(q.RECALL_TABLES)
        if self._embedder is not None:
            dims = self._embedder.dimensions
            for ddl in q.vector_ddl(ks, dims):
                self._session.execute(ddl, timeout=60)
            out["vector"] = self._session.prepare(q.insert_vector(ks, dims))
            tables.append(q.vector_table(dims))
        self._tables = tuple(tables)
        for table in tables:
            out[f"delete_{table}"] = self._session.prepare(q.DELETE_RECALL.format(ks=ks, table=table))
            out[f"delete_event_{table}"] = self._session.prepare(q.DELETE_RECALL_EVENT.format(ks=ks, table=table))
        return out

    # -- the batch -------------------------------------------------------------------------------------------

    async def project(
        self,
        records: Sequence[SourceRecord],
        dead_letters: DeadLetterSink,
        *,
        save_offsets: Callable[[tuple[str, int]], bool] = lambda tp: True,
    ) -> BatchOutcome:
        """Index ``records`` (in consumed order), then store offsets; same contract as ``Projector.project``.

        Records that do not decode are skipped: the projector reads the same
        records and dead-letters them (one dead letter per bad record, not
        two). Only rows Cassandra rejects are dead-lettered here (stage
        ``index``). Raises ``StoreUnavailable`` when Cassandra fails; nothing
        is then stored for the batch, so it can simply be retried.
        """
        if self._gate is not None and records:
            await self._gate.wait(sorted({(r.topic, r.partition) for r in records}))
        if self.scope == "deep" and records:
            await self._follow_primary(records)
        outcome = BatchOutcome()
        parsed, keys = await self._parse_and_judge(records, outcome, self._parse)
        segment: list[EventItem] = []
        for record, item in parsed:
            # Refused (what the projector dead-letters, for its key too, search does not find either), a command
            # or a record of no session: nothing to index.
            if not isinstance(item, EventItem | DeleteItem):
                outcome.ignored += 1
            elif isinstance(item, DeleteItem):
                await self._index(segment, outcome)
                segment = []
                if self.scope != "deep":  # the primary stage removed the session's rows, its later chunks too
                    await self._delete(item.command)
                    self._stamps.forget((record.topic, record.partition), item.session_key)
                outcome.deletes += 1
            else:
                segment.append(item)
        await self._index(segment, outcome)
        # The projector's rows are the record keys' one written copy: the indexer reads them and never writes
        # (a lagging indexer's fix, written last, had replaced the projector's, which then refused the
        # session's own records after a restart). What it fixed itself it keeps in memory only.
        keys.remember()
        for letter in outcome.dead_letters:
            await dead_letters(letter)
        kept = {tp: off for tp, off in outcome.offsets.items() if save_offsets(tp)}
        if kept:
            await self._save_offsets(kept)
        return outcome

    def _parse(self, record: SourceRecord) -> SessionItem | None:
        """A record of the events topic as both stages parse it (``None``: another topic's)."""
        if record.topic != self.events_topic:
            return None
        return parse_session_record(record, self.max_record_bytes, keep_data=False)

    async def _index(self, items: list[EventItem], outcome: BatchOutcome) -> None:
        if not items:
            return
        if self.scope == "deep":
            await self._index_deep(items, outcome)
            return
        markers, placements = await asyncio.gather(self._markers({_session(i.event) for i in items}),
                                                   self._place(items))  # fmt: skip
        seqs = {id(item): placements[n].seq for n, item in enumerate(items) if n in placements}
        live = [i for i in items if not _covered(markers, i)]
        outcome.skipped_deleted += len(items) - len(live)
        built: list[tuple[EventItem, RecallRows]] = []
        for n, item in enumerate(live, start=1):
            # The primary stage does not cut the chunks it leaves to the deep stage.
            rows = recall_rows(item.event, seqs.get(id(item), item.record.offset),
                               None if self.scope == "all" else self.primary_chunks)  # fmt: skip
            if rows is not None:
                built.append((item, rows))
            if n % _YIELD_EVERY == 0:
                await asyncio.sleep(0)  # tokenizing is CPU: let a projector sharing the loop write meanwhile
        outcome.ignored += len(live) - len(built)  # not searchable: tool calls, partials, empty texts
        if not built:
            return
        rejected = await self._write_pipelined(len(built), lambda a, b: self._batches(built, a, b))
        for index, exc in sorted(rejected.items()):
            outcome.dead_letters.append(
                dead_letter(built[index][0].record, exc, f"cassandra rejected the recall rows: {exc}", stage=self.STAGE)
            )
        written = [b for n, b in enumerate(built) if n not in rejected]
        outcome.events += len(written)
        self.indexed_tokens += sum(rows.tokens for _, rows in written)
        if self._embedder is not None and written:
            await self._write_vectors(written)
        await self._recheck(written)

    async def _place(self, items: list[EventItem]) -> dict[int, Placement]:
        """Where the events of ``items`` (in log order) that are published again go, by index: where the log
        first had them, as the projector places them (``Projector._place``; see ``projections.late_events``).

        Every event moves its session's latest timestamp; the late ones (or stamped in the
        latest's millisecond) that the index would write are looked up in the index's own
        rows (one row each, concurrently: such events are few). Sessions not remembered are
        read first (their newest line).
        """
        keys = [((i.record.topic, i.record.partition), _session(i.event)) for i in items]
        orders = await self._stamp_orders(self._stamps, self._p["latest_ts"], keys, [i.event.timestamp for i in items],
                                          [i.event.event_id for i in items])  # fmt: skip
        late = [n for n, o in enumerate(orders) if o < 0]
        ties = [n for n, o in enumerate(orders) if o == 0]
        if not late and not ties:
            return {}
        indexed = [n for n in (*late, *ties) if recall_eligible(items[n].event)]
        found = await self._read_many(self._p["seq"], [(*keys[n][1], items[n].event.timestamp, items[n].event.event_id)
                                                       for n in indexed])  # fmt: skip
        stored = {n: (items[n].event.timestamp, row.seq) for n, rows in zip(indexed, found, strict=True)
                  for row in rows if row.seq is not None}  # fmt: skip
        records = [((keys[n][1], i.event.event_id), i.event.timestamp, i.record.offset) for n, i in enumerate(items)]
        return place_late(records, late, stored, ties)

    def _batches(self, built: list[tuple[EventItem, RecallRows]], start: int, stop: int) -> list[Batch]:
        """The rows of ``built[start:stop]`` grouped by partition, cut into size-capped batches.

        The documents and chunks of a tenant share its partition; the context lines of a session share
        the session's (``recall_lines``).
        """
        groups: dict[tuple[str, ...], list[Row]] = {}
        doc_stmt, chunk_stmt, line_stmt = self._bind_doc, self._bind_chunk, self._bind_line
        for index in range(start, stop):
            item, rows = built[index]
            ev = item.event
            tenant = (ev.app_name, ev.user_id)
            group = groups.get(tenant)
            if group is None:
                group = groups[tenant] = []
            group.append((doc_stmt, rows.doc, index, rows.size))
            for chunk, size in zip(rows.chunks, rows.chunk_sizes, strict=True):
                group.append((chunk_stmt, chunk, index, size))
            lines = groups.get(session := (ev.app_name, ev.user_id, ev.session_id))
            if lines is None:
                lines = groups[session] = []
            lines.append((line_stmt, rows.line, index, _LINE_BYTES))
        return self._cut(groups)

    async def _write_vectors(self, written: list[tuple[EventItem, RecallRows]]) -> None:
        assert self._embedder is not None
        try:
            embeddings = await self._embedder.embed([rows.text[:MAX_EMBED_CHARS] for _, rows in written])
        except Exception as exc:  # an embedder outage must not stall indexing: lexical search still works
            log.warning("embedder failed, %d documents stored without vectors: %s", len(written), exc)
            return
        work = [(self._p["vector"], (*rows.doc[:5], vec)) for (_, rows), vec in zip(written, embeddings, strict=True)]
        failed = await self._run_concurrent(work)
        if failed:
            raise StoreUnavailable(f"cassandra vector write failed: {failed[0][1]}")

    # -- the deep stage ---------------------------------------------------------------------------------------

    async def _follow_primary(self, records: Sequence[SourceRecord]) -> None:
        """Return once the primary stage has stored offsets past ``records`` (see the module); ``PrimaryBehind``
        after ``primary_wait_s``."""
        need: dict[tuple[str, int], int] = {}
        for r in records:
            key = (r.topic, r.partition)
            need[key] = max(need.get(key, 0), r.offset + 1)
        started = time.monotonic()
        try:
            while True:
                rows = await self._run(self._stage_p["load_offsets"], (self.primary_group,))
                stored = {(r.topic, r.partition): r.next_offset for r in rows}
                short = {tp: off for tp, off in need.items() if (stored.get(tp) or 0) < off}
                if not short:
                    return
                if time.monotonic() - started >= self.primary_wait_s:
                    tp, off = min(short.items())
                    raise PrimaryBehind(f"the primary indexer ({self.primary_group}) is at {tp[0]}[{tp[1]}]@"
                                        f"{stored.get(tp, 0)}, this batch reaches {off}")  # fmt: skip
                await asyncio.sleep(self.primary_check_s)
        finally:
            self.waited_primary_s += time.monotonic() - started

    async def _primary_seqs(self, items: Sequence[EventItem]) -> list[int | None]:
        """The ``seq`` of the primary stage's document row of each of ``items`` (``None``: no row)."""
        found = await self._read_many(self._p["seq"], [(*_session(i.event), i.event.timestamp, i.event.event_id)
                                                       for i in items])  # fmt: skip
        return [next((r.seq for r in rows if r.seq is not None), None) for rows in found]

    async def _index_deep(self, items: list[EventItem], outcome: BatchOutcome) -> None:
        """Write the later chunks (beyond ``primary_chunks``) of ``items`` whose document the primary indexed."""
        candidates: list[EventItem] = []
        for n, item in enumerate(items, start=1):
            if has_later_chunks(item.event):
                candidates.append(item)
            if n % _YIELD_EVERY == 0:
                await asyncio.sleep(0)
        outcome.ignored += len(items) - len(candidates)
        if not candidates:
            return
        markers, seqs = await asyncio.gather(self._markers({_session(i.event) for i in candidates}),
                                             self._primary_seqs(candidates))  # fmt: skip
        built: list[tuple[EventItem, RecallRows]] = []
        for n, (item, seq) in enumerate(zip(candidates, seqs, strict=True), start=1):
            if seq is None or _covered(markers, item):
                outcome.skipped_deleted += 1  # deleted (or never indexed): its later chunks must not show
                continue
            rows = recall_rows(item.event, seq)
            deep = split_chunks(rows, self.primary_chunks)[1] if rows is not None else None
            if deep is None:
                outcome.ignored += 1
            else:
                built.append((item, deep))
            if n % _YIELD_EVERY_LONG == 0:
                await asyncio.sleep(0)
        if not built:
            return
        rejected = await self._write_pipelined(len(built), lambda a, b: self._deep_batches(built, a, b))
        for index, exc in sorted(rejected.items()):
            reason = f"cassandra rejected the later chunks: {exc}"
            outcome.dead_letters.append(dead_letter(built[index][0].record, exc, reason, stage=self.STAGE))
        written = [b for n, b in enumerate(built) if n not in rejected]
        outcome.events += len(written)
        self.indexed_tokens += sum(rows.tokens for _, rows in written)
        await self._recheck_deep(written)

    def _deep_batches(self, built: list[tuple[EventItem, RecallRows]], start: int, stop: int) -> list[Batch]:
        """The ``recall_chunks`` rows of ``built[start:stop]`` by tenant partition, cut into size-capped batches."""
        groups: dict[tuple[str, ...], list[Row]] = {}
        for index in range(start, stop):
            item, rows = built[index]
            group = groups.setdefault((item.event.app_name, item.event.user_id), [])
            for chunk, size in zip(rows.chunks, rows.chunk_sizes, strict=True):
                group.append((self._bind_chunk, chunk, index, size))
        return self._cut(groups)

    async def _recheck_deep(self, written: list[tuple[EventItem, RecallRows]]) -> None:
        """Remove the later chunks just written of events whose document a deletion removed meanwhile."""
        if not written:
            return
        items = [item for item, _ in written]
        markers, seqs = await asyncio.gather(self._markers({_session(i.event) for i in items}),
                                             self._primary_seqs(items))  # fmt: skip
        stale = [i for i, seq in zip(items, seqs, strict=True) if seq is None or _covered(markers, i)]
        if not stale:
            return
        failed = await self._run_concurrent((self._p["delete_event_recall_chunks"],
                                             (*_session(i.event), i.event.timestamp, i.event.event_id))
                                            for i in stale)  # fmt: skip
        if failed:
            raise StoreUnavailable(f"cassandra delete failed: {failed[0][1]}")
        log.info("removed the later chunks of %d events deleted while they were indexed", len(stale))

    # -- deletions -------------------------------------------------------------------------------------------

    async def _markers(self, sessions: set[_Session]) -> dict[_Session, _Marker]:
        """The deletion markers of ``sessions`` (one query per tenant, concurrently)."""
        by_tenant: dict[tuple[str, str], list[str]] = {}
        for app, user, sid in sessions:
            by_tenant.setdefault((app, user), []).append(sid)
        tenants = list(by_tenant.items())
        pages = await asyncio.gather(
            *(self._run(self._p["markers"], (app, user, sorted(sids))) for (app, user), sids in tenants)
        )
        out: dict[_Session, _Marker] = {}
        for ((app, user), _), rows in zip(tenants, pages, strict=True):
            for r in rows:
                deleted_at = r.deleted_at.replace(tzinfo=UTC) if getattr(r, "deleted_at", None) else None
                out[(app, user, r.session_id)] = _Marker(r.deleted_partition, r.deleted_offset, deleted_at)
        return out

    async def _recheck(self, written: list[tuple[EventItem, RecallRows]]) -> None:
        """Remove what was just written for events a deletion that landed meanwhile removed."""
        if not written:
            return
        markers = await self._markers({_session(item.event) for item, _ in written})
        if not markers:
            return
        stale = [item for item, _ in written if _covered(markers, item)]
        if not stale:
            return
        work: list[tuple[Any, Any]] = []
        for item in stale:
            ev = item.event
            key = (ev.app_name, ev.user_id, ev.session_id, ev.timestamp, ev.event_id)
            work.extend((self._p[f"delete_event_{table}"], key) for table in self._tables)
        failed = await self._run_concurrent(work)
        if failed:
            raise StoreUnavailable(f"cassandra delete failed: {failed[0][1]}")
        log.info("removed the recall rows of %d events deleted while they were indexed", len(stale))

    async def _delete(self, command: DeleteSession) -> None:
        pk = (command.app_name, command.user_id, command.session_id)
        failed = await self._run_concurrent((self._p[f"delete_{table}"], pk) for table in self._tables)
        if failed:
            raise StoreUnavailable(f"cassandra delete failed: {failed[0][1]}")


def _session(event: SessionEvent) -> _Session:
    return (event.app_name, event.user_id, event.session_id)


def _covered(markers: dict[_Session, _Marker], item: EventItem) -> bool:
    marker = markers.get(_session(item.event))
    return marker is not None and marker.covers(item.record, item.event)
