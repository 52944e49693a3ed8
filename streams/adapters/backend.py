"""The framework-neutral facade the adapters share: publish, read the view, summarize, recall.

A framework session store needs four things from distill:

- ``publish``: what the model and the tools produced, as :class:`~schemas.SessionEvent`\\ s
  on the events topic (the worker counts them and summarizes when the app's triggers fire);
- ``view``: what the next request must hold — the key's own summary (never another
  branch's) and the events after its boundary, read from Cassandra with bounded reads;
- ``summarize``: a forced ``summarize_sync`` (the guides' ``create_session_summary(force=True)``);
- ``recall``: the ``session_search`` / ``session_load`` executor for the session.

Read-your-writes: the projector writes to Cassandra a moment after an event is
acknowledged by Kafka, while a framework reads its session back right away
(the next turn). Events this process published and Cassandra does not show yet
are therefore kept in a per-session pending list and merged into the view until
the projection has them or a summary boundary covers them; the list only ever
holds that projection lag.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any

from projections.cassandra_session import aexecute, connect
from projections.context_read import ContextReader, visible
from projections.read_api import SessionReader, StoredSummary
from projections.statements import SELECT_DELETED, SELECT_TENANT_DELETED
from schemas import DeleteSession, SessionEvent, SessionKey, SessionSummary
from schemas.base import as_utc
from schemas.reads import AppliedSummary, ContextRead
from schemas.settings import Settings
from streams.adapters.native import NATIVE_FIELD
from streams.client import DistillClient
from streams.clients.recall_reader import CassandraRecallReader
from streams.context.from_read import read_cap_note
from streams.context.history import calls_alone, calls_for_retained_results, covered_mask
from streams.context.recall_tools import RecallCapabilities, RecallExecutor
from streams.errors import DistillError
from streams.rules.boundaries import covers

FULL_RECALL = RecallCapabilities(search=True, load=True)
logger = logging.getLogger("distill.adapters")


class BackendNotStartedError(DistillError):
    """The backend was used before :meth:`SessionBackend.start` (or after :meth:`close`)."""


EPOCH_READ_ATTEMPTS = 3
"""Context reads a view makes at most while the session's summary epoch changes under it."""


class EpochSwitchingError(DistillError):
    """The session's summary epoch changed during every read of a view (switches back and forth): no view."""


class _EpochSwitched(Exception):
    """The summary record read after a context read is of another epoch than the read's."""


class SummaryRecordMissingError(DistillError):
    """The applicable summary of a context read has no readable record (the projection is inconsistent)."""


@dataclass(frozen=True)
class SessionView:
    """What the next request of ``(session, filter key)`` must hold.

    ``summary`` is the key's latest summary (``None`` before the first one);
    ``events`` are the events after its boundary, chronological, partial
    chunks left out; ``stored_events`` counts every non-partial event of the
    session known so far (projected or pending), covered ones included.
    ``truncated``: the read stopped at its event cap (``ContextReader.max_events``),
    so the oldest events after the boundary (the oldest of the whole history
    without a summary) are missing from ``events`` (also logged as a warning).

    ``calls_only``: the covered events ``events`` holds only for some of their
    tool calls — by event id, the ids of those calls, whose results lie after
    the boundary. Such an event is shown as those calls alone (its text, its
    reasoning and its other calls are the summary's: a call whose result the
    boundary covers has no result in the view, and the API refuses a call
    without one). ``events`` holds the whole event (the framework record, the
    item indices of ``pop_item``); :meth:`shown` applies the reduction.
    """

    key: SessionKey
    filter_key: str
    summary: SessionSummary | None
    events: tuple[SessionEvent, ...]
    stored_events: int
    truncated: bool = False
    calls_only: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def cap_note(self, *, session_load: bool) -> str:
        """The note the history must carry when :attr:`truncated` (``""`` otherwise): older events are left out
        of it, from which event on it holds the history, and how to read them back
        (:func:`streams.context.from_read.read_cap_note`, the note of the assembled request)."""
        if not self.truncated:
            return ""
        first = next((e.event_id for e in self.events if e.event_id not in self.calls_only), None)
        return read_cap_note(first, after_summary=self.summary is not None, session_load=session_load)

    def shown(self, event: SessionEvent) -> SessionEvent:
        """``event`` as the view shows it: a covered event of :attr:`calls_only` reduced to those calls, its
        framework record (``native``) left out (it holds the whole event); any other event as it is."""
        ids = self.calls_only.get(event.event_id)
        if ids is None:
            return event
        message = calls_alone(event.message, ids)
        data = event.model_dump()
        data.pop(NATIVE_FIELD, None)
        return SessionEvent.model_validate({**data, "message": message.model_dump()})


@dataclass
class _Pending:
    events: list[SessionEvent] = field(default_factory=list)
    seqs: dict[str, int] = field(default_factory=dict)
    """Each event's log position (its events-topic offset)."""


@dataclass
class _Deleted:
    """A ``delete_session`` this process published, until Cassandra shows it done.

    The projector applies the tombstone a moment after Kafka acknowledges it;
    until then the view leaves out what belongs to the deleted session: events
    stamped at or before ``at`` (unless this process published them after the
    delete, ``after``) and summaries made before it (the projector's own rule
    for a summary that arrives late).
    """

    at: datetime
    published_at: datetime
    after: set[str] = field(default_factory=set)

    def hides(self, event: SessionEvent) -> bool:
        return event.timestamp <= self.at and event.event_id not in self.after


class SessionBackend:
    """One process's connection to distill: a Kafka client and a Cassandra reader.

    ``settings`` name Kafka, Cassandra (keyspace) and the topics the worker and
    the projector use. Open with ``async with SessionBackend(settings) as backend``
    (or :meth:`start` / :meth:`close`); share one backend between sessions.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        client: DistillClient | None = None,
        reader: SessionReader | None = None,
        context: ContextReader | None = None,
        recall: RecallCapabilities = FULL_RECALL,
    ) -> None:
        self.settings = settings
        self.recall_capabilities = recall
        self._client = client
        self._reader = reader
        self._context = context
        self._own_client = client is None
        self._cluster: object | None = None
        self._cql: Any = None
        self._lock = asyncio.Lock()
        self._pending: dict[SessionKey, _Pending] = {}
        self._latest: dict[tuple[SessionKey, str], SessionSummary] = {}
        self._deleted: dict[SessionKey, _Deleted] = {}
        self._newest: dict[SessionKey, datetime] = {}
        self._select_deleted: Any = None

    async def __aenter__(self) -> SessionBackend:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def start(self) -> None:
        """Connect to Kafka and Cassandra (blocking driver steps run off the event loop); idempotent."""
        async with self._lock:
            if self._client is None:
                self._client = DistillClient(self.settings)
            await self._client.start()
            if self._reader is None:
                cluster, session = await asyncio.to_thread(
                    connect, self.settings.cassandra, self.settings.cassandra.keyspace
                )
                self._cluster, self._cql = cluster, session
                self._reader = await asyncio.to_thread(SessionReader, session, self.settings.cassandra.keyspace)
            if self._context is None:
                if self._cql is None:
                    raise BackendNotStartedError("an injected SessionReader needs an injected ContextReader too")
                self._context = await asyncio.to_thread(ContextReader, self._cql, self.settings.cassandra.keyspace)

    async def close(self) -> None:
        if self._client is not None and self._own_client:
            await self._client.stop()
            self._client = None
        if self._cluster is not None:
            await asyncio.to_thread(self._cluster.shutdown)  # type: ignore[attr-defined]
            self._cluster = None
            self._cql = None
            self._reader = None
            self._context = None

    @property
    def client(self) -> DistillClient:
        if self._client is None:
            raise BackendNotStartedError("SessionBackend is not started (use 'async with SessionBackend(settings)')")
        return self._client

    @property
    def context(self) -> ContextReader:
        if self._context is None:
            raise BackendNotStartedError("SessionBackend is not started (use 'async with SessionBackend(settings)')")
        return self._context

    @property
    def reader(self) -> SessionReader:
        if self._reader is None:
            raise BackendNotStartedError("SessionBackend is not started (use 'async with SessionBackend(settings)')")
        return self._reader

    # -- writes ----------------------------------------------------------------------------------------------

    async def publish(self, events: Sequence[SessionEvent]) -> None:
        """Publish ``events`` in order; they show in :meth:`view` at once (pending until projected)."""
        if not events:
            return
        offsets = await self.client.publish_logged(events)
        for event, seq in zip(events, offsets, strict=True):
            deleted = self._deleted.get(event.session_key)
            if deleted is not None:
                deleted.after.add(event.event_id)
            if not event.partial:
                pending = self._pending.setdefault(event.session_key, _Pending())
                pending.events.append(event)
                pending.seqs[event.event_id] = seq

    async def delete(self, key: SessionKey) -> None:
        """Publish the ``delete_session`` tombstone; the session is gone from :meth:`view` and
        :meth:`session_ids` at once (its pending events forgotten, its projected rows hidden
        until the projector has removed them)."""
        published_at = datetime.now(UTC)
        pending = self._pending.pop(key, None)
        stamps = [published_at, *(e.timestamp for e in (pending.events if pending else ()))]
        if key in self._newest:
            stamps.append(self._newest[key])
        self._deleted[key] = _Deleted(at=max(stamps), published_at=published_at)
        await self.client.publish(
            DeleteSession(app_name=key.app_name, user_id=key.user_id, session_id=key.session_id,
                          command_id=uuid.uuid4().hex)
        )  # fmt: skip
        for k in [k for k in self._latest if k[0] == key]:
            del self._latest[k]

    # -- reads -----------------------------------------------------------------------------------------------

    async def latest_summary(self, key: SessionKey, filter_key: str = "") -> SessionSummary | None:
        """The newest summary of exactly ``filter_key``: the projected one, or a newer one this process received."""
        stored = await self.reader.latest_summary(key, filter_key)
        known = self._latest.get((key, filter_key))
        record = stored.record if stored is not None else None
        if record is None:
            return known
        return known if known is not None and newer_on_line(known, record.epoch, record.version) else record

    async def view(self, key: SessionKey, filter_key: str = "") -> SessionView:
        """The summary that applies to ``filter_key`` and every event after its boundary (projected and pending).

        One :meth:`ContextReader.read <projections.context_read.ContextReader.read>`
        gives the applicable summary (the key's own, else its nearest
        ancestor's) and the events; of the covered events it brings back, only
        the tool calls whose results are after the boundary stay (a framework
        replays its history verbatim, and a result without its call is an
        invalid request); the rest the summary holds. A newer summary of the
        key this process received (:meth:`remember`) and events it published
        that Cassandra does not show yet are merged in: those after every event
        the read holds (the log's order, whatever their stamps), unless the
        read's summary covers them (by log position). The key's own summary
        received in place of the ancestor's the read applied reads the key's
        whole history (its boundary may lie before the ancestor's).
        """
        read, summary = await self._read_with_record(key, filter_key)
        if summary is not None and read.summary is not None and summary.filter_key != read.summary.filter_key:
            # The key's own summary, received before the projector stored it, in place of the ancestor's the
            # read was cut at: its boundary may lie before that cut, and the events between are in neither.
            read = await self.context.read(key, filter_key, full_history=True)
        stats = await self.reader.session_stats(key)
        projected = list(read.events)
        deleted = self._deleted.get(key)
        if deleted is not None:
            old = [e for e in projected if deleted.hides(e)]
            projected = [e for e in projected if not deleted.hides(e)]
            stale = summary is not None and summary.created_at <= deleted.at
            summary = None if stale else summary
            stats = {"events": len(projected)}
            if not old and not stale and await self._delete_projected(key, deleted):
                del self._deleted[key]
        if projected:
            newest = max(e.timestamp for e in projected)  # log order: the last event need not be the newest
            self._newest[key] = max(self._newest.get(key, newest), newest)
        seen = {e.event_id for e in projected}
        pending = self._pending.get(key)
        extra: list[SessionEvent] = []
        if pending is not None:
            pending.events = [e for e in pending.events if e.event_id not in seen]
            extra = [e for e in pending.events if visible(e.filter_key, filter_key) and not _cut_by(read, pending, e)]
        # By log position, whatever the stamps (another producer's clock ahead): the projector writes a batch's
        # rows concurrently, so an event the read does not hold yet may lie before some it holds.
        log = _in_log_order(projected, read.event_seqs, extra, pending.seqs if pending is not None else {})
        merged = [e for e in log if not e.partial and visible(e.filter_key, filter_key)]
        covered = covered_mask(merged, summary.boundary if summary is not None else None, log=log)
        after = {e.event_id for e, c in zip(merged, covered, strict=True) if not c}
        # A covered call event stays for the calls whose results are after the boundary, and only for them:
        # a parallel call answered before the boundary has its result covered (absent), and a call shown
        # without its result makes the provider refuse every request (as ``project_history`` reduces it).
        kept_at = {i for i, c in enumerate(covered) if not c}
        restored = calls_for_retained_results([e.message for e in merged], covered, kept_at)
        calls_only = {merged[i].event_id: frozenset(ids) for i, ids in restored.items()}
        kept = [e for e in merged if e.event_id in after or e.event_id in calls_only]
        total = int(stats.get("events") or 0) + len(extra)
        if read.stats.truncated:
            logger.warning(
                "session view: the read stopped at its event cap, the oldest events of %s are missing from it",
                "the history" if summary is None else f"the events after summary v{summary.version}",
                extra={"session_id": key.session_id, "app_name": key.app_name, "filter_key": filter_key,
                       "event_rows": read.stats.event_rows},
            )  # fmt: skip
        return SessionView(key, filter_key, summary, tuple(kept), total, truncated=read.stats.truncated,
                           calls_only=calls_only)  # fmt: skip

    async def _delete_projected(self, key: SessionKey, deleted: _Deleted) -> bool:
        """Whether the projector has applied this process's tombstone of ``key`` (``deleted_sessions``)."""
        if self._cql is None:
            return False
        if self._select_deleted is None:
            self._select_deleted = await asyncio.to_thread(
                self._cql.prepare, SELECT_DELETED.format(ks=self.settings.cassandra.keyspace)
            )
        stmt = self._select_deleted
        rows = list(await aexecute(self._cql, stmt, (key.app_name, key.user_id, key.session_id)))
        if not rows or rows[0].deleted_at is None:
            return False
        at = rows[0].deleted_at
        at = at.replace(tzinfo=UTC) if at.tzinfo is None else at
        return bool(at >= deleted.published_at - timedelta(milliseconds=1))  # Cassandra keeps milliseconds

    async def _read_with_record(self, key: SessionKey, filter_key: str) -> tuple[ContextRead, SessionSummary | None]:
        """The context read and the full record of its summary, of one epoch.

        The record is read after the context read. An epoch switch landing in between would pair
        the read's events, cut at one line's boundary, with the other line's summary, whose
        boundary may lie before that cut: the events between would be in neither. The read is
        then done again (a switch replaces a session's heads at once, so the next read sees one
        line); :class:`EpochSwitchingError` when the epoch keeps changing under it.
        """
        for _ in range(EPOCH_READ_ATTEMPTS):
            read = await self.context.read(key, filter_key)
            try:
                return read, await self._applied_record(key, filter_key, read.summary, read.served_epoch)
            except _EpochSwitched:
                continue
        raise EpochSwitchingError(
            f"the summary epoch of {key} changed during each of {EPOCH_READ_ATTEMPTS} reads of its view"
        )

    async def _applied_record(
        self, key: SessionKey, filter_key: str, applied: AppliedSummary | None, served_epoch: int = 0
    ) -> SessionSummary | None:
        """The full record of the applicable summary, or the newer one of the key this process received
        (on the epoch the read serves: versions of two epochs do not compare)."""
        known = self._latest.get((key, filter_key))
        if (
            known is not None
            and known.epoch == served_epoch
            and (applied is None or applied.filter_key != filter_key or known.version > applied.version)
        ):
            return known
        if applied is None:
            return None
        # Read after the context read, and on one epoch summaries only move forward: this version is the read's
        # or newer (a newer boundary only covers more of the events the read returned, which ``view`` then leaves
        # out). Another epoch's is neither (a switch in between): the caller reads again.
        stored = await self.reader.latest_summary(key, applied.filter_key)
        if stored is not None and stored.record is not None and stored.record.epoch != applied.epoch:
            raise _EpochSwitched
        if stored is None or stored.record is None or stored.record.version < applied.version:
            raise SummaryRecordMissingError(
                f"summary v{applied.version} of {key} / {applied.filter_key!r} is in the context read but not "
                "readable as a record"
            )
        return stored.record

    async def boundary_event(self, key: SessionKey, summary: SessionSummary) -> SessionEvent | None:
        """The event at ``summary``'s boundary (the newest covered one): one this process published and
        Cassandra does not show yet, else read from the cutoff on."""
        wanted = summary.boundary.last_event_id
        pending = self._pending.get(key)
        for event in reversed(pending.events if pending is not None else []):
            if event.event_id == wanted:
                return event
        probe = StoredSummary(
            filter_key=summary.filter_key, version=summary.version, summary=summary.summary,
            cutoff_at=summary.boundary.cutoff_at - timedelta(milliseconds=1), last_event_id=None,
            created_at=summary.created_at, record=summary,
        )  # fmt: skip
        rows = await self.reader.events_after_boundary(key, summary.filter_key, summary=probe, use_latest=False)
        for row in rows:
            if row.event_id == wanted:
                return row.event()
        return None

    async def session_ids(self, app_name: str, user_id: str) -> dict[str, datetime]:
        """The sessions of ``(app_name, user_id)`` with a searchable event, and their newest event time.

        Not in the read API: one ``GROUP BY session_id`` over the tenant's
        ``recall_docs`` partition (a bounded, single-partition read), plus the
        sessions this process published to and Cassandra does not show yet. A
        session whose newest indexed event is no later than its deletion marker
        (``deleted_sessions``, written by the projector before anything else of
        the deletion) is left out: the index removes its rows later, and a
        lagging indexer may write some back until it sees the marker.
        """
        out: dict[str, datetime] = {}
        if self._cql is not None:
            ks = self.settings.cassandra.keyspace
            stmt, markers = await asyncio.to_thread(
                lambda: (
                    self._cql.prepare(
                        f"SELECT session_id, max(ts) AS last FROM {ks}.recall_docs "
                        "WHERE app_name = ? AND user_id = ? GROUP BY session_id"
                    ),
                    self._cql.prepare(SELECT_TENANT_DELETED.format(ks=ks)),
                )
            )
            rows, marker_rows = await asyncio.gather(
                aexecute(self._cql, stmt, (app_name, user_id)), aexecute(self._cql, markers, (app_name, user_id))
            )
            for row in rows:
                out[row.session_id] = as_utc(row.last)
            for row in marker_rows:
                last = out.get(row.session_id)
                if row.deleted_at is not None and last is not None and last <= as_utc(row.deleted_at):
                    del out[row.session_id]
        for key, deleted in self._deleted.items():
            if (key.app_name, key.user_id) == (app_name, user_id) and out.get(key.session_id, deleted.at) <= deleted.at:
                out.pop(key.session_id, None)  # its newest searchable event is the deleted session's
        for key, pending in self._pending.items():
            if (key.app_name, key.user_id) == (app_name, user_id) and pending.events:
                last = pending.events[-1].timestamp
                out[key.session_id] = max(out.get(key.session_id, last), last)
        return out

    # -- summaries and recall --------------------------------------------------------------------------------

    async def summarize(
        self, key: SessionKey, filter_key: str = "", *, force: bool = True, timeout: float = 60.0
    ) -> SessionSummary | None:
        """Ask the worker for a summary of ``filter_key`` now (``summarize_sync``) and return the newest one.

        The worker answers once the key's jobs in flight are done (with the summary
        covering the events, or the newest one); when it has none to name, the
        newest stored summary is returned, which may be ``None`` for a session
        never summarized.
        """
        answer = await self.client.request_summary(key, filter_key, wait=True, timeout=timeout, force=force)
        if answer is not None:
            self.remember(answer)
        return await self.latest_summary(key, filter_key)

    def remember(self, summary: SessionSummary) -> None:
        """Record a summary this process received (before the projector stores it)."""
        k = (SessionKey(summary.app_name, summary.user_id, summary.session_id), summary.filter_key)
        current = self._latest.get(k)
        if current is None or summary.epoch != current.epoch or summary.version > current.version:
            self._latest[k] = summary

    def recall(
        self, key: SessionKey, filter_key: str = "", *, capabilities: RecallCapabilities | None = None
    ) -> RecallExecutor:
        """The ``session_search`` / ``session_load`` executor of the session (default: the backend's capabilities)."""
        return RecallExecutor(
            CassandraRecallReader(self.reader), app_name=key.app_name, user_id=key.user_id,
            session_id=key.session_id, filter_key=filter_key,
            capabilities=self.recall_capabilities if capabilities is None else capabilities,
        )  # fmt: skip


def newer_on_line(summary: SessionSummary, epoch: int, version: int) -> bool:
    """Whether ``summary`` is newer than version ``version`` of ``epoch``: the same line, a higher version
    (``schemas.epochs``: a summary of another epoch is neither newer nor older; the read side's wins)."""
    return summary.epoch == epoch and summary.version > version


def _in_log_order(
    projected: Sequence[SessionEvent],
    seqs: Mapping[str, int],
    extra: Sequence[SessionEvent],
    extra_seqs: Mapping[str, int],
) -> list[SessionEvent]:
    """``projected`` (in the read's order) and ``extra`` (published by this process, not read yet) merged by log
    position; an event whose position is unknown keeps its place (projected) or goes last (extra)."""
    out = list(projected)
    for event in extra:
        seq = extra_seqs.get(event.event_id)
        at = len(out)
        while seq is not None and at > 0:
            before = seqs.get(out[at - 1].event_id, extra_seqs.get(out[at - 1].event_id))
            if before is None or before < seq:
                break
            at -= 1
        out.insert(at, event)
    return out


def _cut_by(read: ContextRead, pending: _Pending, event: SessionEvent) -> bool:
    """Whether ``read`` leaves out ``event`` (one this process published) as covered by its summary: the
    boundary event or logged up to it (``covers``; by its stamp only when a log position is unknown)."""
    if read.summary is None or read.full_history:
        return False
    seq = pending.seqs.get(event.event_id)
    return covers(read.summary.boundary, event.event_id, event.timestamp, seq, read.boundary_seq)
