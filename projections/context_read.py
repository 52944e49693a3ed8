"""The one read an agent makes before a model call: everything ``assemble`` needs, in bounded slices.

For (session, filter key) :meth:`ContextReader.read` returns a
:class:`schemas.reads.ContextRead` such that
``streams.context.assemble_from_read(read, ...)`` builds the request the full
in-memory history would give (``tests/integration/test_context_read_property.py``
checks it over thousands of generated sessions). It reads:

1. the latest summaries of the session (one small partition: the heads of the
   epoch the session is served from, which a switch replaces all at once, so
   the read sees one epoch) and picks the one that applies to the key
   (:func:`applicable_summary`);
2. **the tail**: the events from the boundary to the end, newest first in pages
   of ``page_size`` (at most ``max_events``; then ``stats.truncated``), kept
   when visible to the key (:func:`visible`: ancestors, descendants and keyless
   events — not only the key's summary input); and, beside it, **the late
   events** logged after the boundary event (``late_events``, clustered by
   log position: see ``projections.late_events``), which the scan by time
   from the boundary cannot reach;
3. **the current user message**: the latest visible user turn of the tail, else
   a backward page scan from the boundary to it (the covered head of the
   current run), of at most ``max_events`` rows (then ``stats.current_unread``:
   not ``truncated``, as a request answering a new message lacks nothing),
   and the late user turns logged after the one found;
4. **the resume tail**: the covered assistant/tool events of the current
   invocation, through the ``session_turns`` index (one slice per invocation);
5. **late results**: the covered call event of each tail tool result whose
   call is not in the tail (``tool_call_events``: every call and result of
   its id, paired as the full history pairs them → the row);
6. **turn anchors**: the covered user messages of every turn the events above
   belong to that does not surely start after the boundary (``session_turns``);
7. the heartbeats of the session's partition: the projector's (``projection_lag``),
   the recall indexer's (``index_lag``) and its deep stage's (``deep_index_lag``:
   the later chunks of long documents), one small partition read.

The events come back in **log order** (``seq``, the Kafka offset: every record
of a session shares one partition), the order the summarizer reads them in, and
with the boundary event itself when it is stored, even when the key does not
see it (it marks where the summary ends: ``streams.context`` cuts after it).
With a boundary whose event is not stored (a timestamp-only boundary of an
older build), the boundary cuts by time, as it always did: a late event stamped
before the cutoff is not read.

No step reads a whole partition unless the session has no summary (then every
event is the prompt's) or the caller asks for ``full_history`` (a request that
will not show the summary shows every event; still at most ``max_events``).
Extra covered events never change the assembled request (they are cut); what
matters is that none of the events the rules of ``streams.context.history``
bring back is missing. Tool call ids may repeat within a session (a framework
numbering calls afresh each turn): a result pairs with its own turn's call
(``tool_call_events``, step 5).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from cassandra.cluster import Session
from cassandra.query import PreparedStatement

from projections.boundary import Cut, to_millis
from projections.cassandra_paging import afetch_all
from projections.cassandra_session import aexecute
from projections.errors import AnchorNotFound
from projections.filter_keys import FULL_SESSION, SEPARATOR, related
from projections.rows import restore_event_json
from projections.stage import DEEP_INDEX_STAGE, INDEX_STAGE, INDEX_STAGES
from schemas import SessionEvent, SessionKey, SessionSummary
from schemas.pairing import Step, pair_steps
from schemas.reads import AppliedSummary, ContextRead, ProjectionLag, ReadStats
from schemas.summaries import stored_summary

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
DEFAULT_PAGE = 500
DEFAULT_MAX_EVENTS = 20_000
HEARTBEAT_STALE_S = 5.0
"""A heartbeat older than this means the projector may be stalled: the lag is at least its age."""
_COLS = "ts, event_id, seq, filter_key, role, partial, text, event_json"
_IN_CHUNK = 100
_TURN_COLS = "invocation_id, request_id, ts, event_id, seq, filter_key, role, partial"
_LATE_COLS = "seq, ts, event_id, filter_key, role, partial"
_LAST_SEQ = 2**63 - 1


def visible(event_key: str, filter_key: str) -> bool:
    """Whether an event of ``event_key`` is in the prompt of ``filter_key``: same line of ancestry, or keyless.

    The Go ``Event.filter`` rule (``projections.filter_keys.related``); a key's
    summary input is the same set, so its boundary hides only summarized events.
    """
    return related(event_key, filter_key)


def ancestors_nearest_first(filter_key: str) -> tuple[str, ...]:
    """``filter_key`` and its ancestors by whole segments, nearest first, the full session (``""``) last."""
    if filter_key == FULL_SESSION:
        return (FULL_SESSION,)
    parts = filter_key.split(SEPARATOR)
    return (*(SEPARATOR.join(parts[:i]) for i in range(len(parts), 0, -1)), FULL_SESSION)


def applicable_summary(summaries: Iterable[SessionSummary], filter_key: str) -> AppliedSummary | None:
    """The summary that applies to ``filter_key`` in a prompt: its own, else the nearest ancestor's.

    An ancestor's summary covers the key's events (a branch's summary input is
    its subtree plus keyless events), so its boundary may cut the key's
    history. A sibling's or a descendant's summary does not cover the key's
    own events: using it would hide events no summary holds, so it never
    applies. Blank texts never count. ``None``: no history is cut.
    """
    usable = {s.filter_key: s for s in summaries if s.summary.strip()}
    for candidate in ancestors_nearest_first(filter_key):
        found = usable.get(candidate)
        if found is not None:
            return AppliedSummary(
                filter_key=found.filter_key,
                version=found.version,
                summary=found.summary,
                boundary=found.boundary,
                source="exact" if candidate == filter_key else "ancestor",
                epoch=found.epoch,
            )
    return None


def is_prompt_user_turn(event: SessionEvent) -> bool:
    """Whether ``event`` is a user turn of a prompt (what ``assemble`` takes as the current message).

    Restates ``streams.context.history.event_message`` + ``is_user_turn_message``
    for user events: complete, role ``user``, not a tool result, with text (an
    error event's text is made from its error).
    """
    msg = event.message
    if event.partial or msg.role != "user" or msg.tool_call_id:
        return False
    return bool(msg.content) or event.error is not None


@dataclass(order=True, frozen=True)
class _Pos:
    """A stored position; positions order by ``seq``, the session's log order."""

    seq: int
    ts: datetime


@dataclass
class _Collected:
    """Events gathered so far, by id, with their stored positions."""

    events: dict[str, tuple[_Pos, SessionEvent]] = field(default_factory=dict)

    def add(self, row: Any) -> SessionEvent:
        found = self.events.get(row.event_id)
        if found is not None:
            return found[1]
        event = restore_event_json(row.event_json, row.text or "")
        self.events[row.event_id] = (_Pos(row.seq, to_millis(row.ts)), event)
        return event

    def ordered(self) -> list[SessionEvent]:
        return [event for _, event in sorted(self.events.values(), key=lambda pe: pe[0])]


class ContextReader:
    """The bounded context read over the projections of one keyspace (statements prepared here: blocking)."""

    def __init__(
        self,
        session: Session,
        keyspace: str,
        *,
        page_size: int = DEFAULT_PAGE,
        max_events: int = DEFAULT_MAX_EVENTS,
        heartbeat_stale_s: float = HEARTBEAT_STALE_S,
    ) -> None:
        if page_size < 1 or max_events < 1:
            raise ValueError(f"page_size and max_events must be >= 1, got {page_size} and {max_events}")
        self._s = session
        self.page_size = page_size
        self.max_events = max_events
        self.heartbeat_stale_s = heartbeat_stale_s
        ks = keyspace
        pk = "app_name = ? AND user_id = ? AND session_id = ?"
        ev = f"SELECT {_COLS} FROM {ks}.events_by_session WHERE {pk}"
        desc = "ORDER BY ts DESC, event_id DESC LIMIT ?"
        self._summaries = self._prep(
            f"SELECT summary, summary_json, served_epoch FROM {ks}.summaries_latest WHERE {pk}"
        )
        self._event_pos = self._prep(f"SELECT ts, seq FROM {ks}.event_ids WHERE {pk} AND event_id = ?")
        self._tail_first = self._prep(f"{ev} AND (ts, event_id) >= (?, ?) {desc}")
        self._tail_next = self._prep(f"{ev} AND (ts, event_id) >= (?, ?) AND (ts, event_id) < (?, ?) {desc}")
        self._before = self._prep(f"{ev} AND (ts, event_id) < (?, ?) {desc}")
        self._at_ts = self._prep(f"{ev} AND ts = ?")
        self._at = self._prep(f"{ev} AND ts = ? AND event_id = ?")
        self._calls = self._prep(f"SELECT call_event_id, call_ts FROM {ks}.tool_calls WHERE {pk} AND tool_call_id IN ?")
        self._call_events = self._prep(
            f"SELECT tool_call_id, seq, event_id, ts, role, filter_key, partial, tool_name FROM {ks}.tool_call_events "
            f"WHERE {pk} AND tool_call_id IN ?"
        )
        self._at_many = self._prep(f"{ev} AND (ts, event_id) IN ?")
        self._late = self._prep(
            f"SELECT {_LATE_COLS} FROM {ks}.late_events WHERE {pk} AND seq > ? AND seq <= ? ORDER BY seq DESC LIMIT ?"
        )
        turns = f"SELECT {_TURN_COLS} FROM {ks}.session_turns WHERE {pk} AND invocation_id = ?"
        self._invocation = self._prep(turns)
        self._turn = self._prep(f"{turns} AND request_id = ?")
        self._source = self._prep(f"SELECT topic, partition FROM {ks}.session_sources WHERE {pk}")
        self._progress = self._prep(
            f"SELECT consumer_group, stage, next_offset, log_end_offset, updated_at, caught_up_at "
            f"FROM {ks}.projector_progress WHERE topic = ? AND partition = ?"
        )

    def _prep(self, cql: str) -> PreparedStatement:
        return self._s.prepare(cql)

    async def read(
        self,
        key: SessionKey,
        filter_key: str = FULL_SESSION,
        *,
        current_event_id: str | None = None,
        full_history: bool = False,
    ) -> ContextRead:
        """Everything ``assemble`` needs for ``(key, filter_key)`` (see the module docstring).

        ``current_event_id`` names the stored user message being answered;
        ``None`` takes the latest visible user turn. ``full_history`` reads the
        tail from the session's start instead of the summary's boundary (for a
        request that will not show the summary), bounded by ``max_events`` like
        any tail (then ``stats.truncated``: the oldest events are missing).
        Raises ``AnchorNotFound`` when ``current_event_id`` is not a stored
        event of the session.
        """
        run = _Run(self, key, filter_key)
        lag_task = asyncio.ensure_future(self._lag(key, run))
        try:
            applied = await run.summary()
            cut = None if full_history else await run.cut(applied)
            await run.tail(cut)
            current = await run.current(current_event_id, cut)
            if cut is not None:
                await run.late_calls()
                await run.invocation(current)
                await run.anchors(cut)
            lag, index_lag, deep_index_lag = await lag_task
        finally:
            if not lag_task.done():
                lag_task.cancel()
        return ContextRead(
            app_name=key.app_name, user_id=key.user_id, session_id=key.session_id, filter_key=filter_key,
            summary=applied, served_epoch=run.served_epoch, events=tuple(run.got.ordered()), full_history=cut is None,
            boundary_seq=cut.anchor_seq if cut is not None else None,
            event_seqs={event_id: pos.seq for event_id, (pos, _) in run.got.events.items()},
            current_event_id=current.event_id if current else None, projection_lag=lag, index_lag=index_lag,
            deep_index_lag=deep_index_lag,
            stats=ReadStats(queries=run.queries, event_rows=run.rows, truncated=run.truncated,
                            current_unread=run.current_unread),
        )  # fmt: skip

    async def _lag(self, key: SessionKey, run: _Run) -> tuple[ProjectionLag, ProjectionLag, ProjectionLag]:
        """The lags of the projector, the recall indexer and the indexer's deep stage on the session's partition."""
        source = next(iter(await run.q(self._source, tuple(key))), None)
        if source is None:
            return ProjectionLag(), ProjectionLag(), ProjectionLag()
        rows = list(await run.q(self._progress, (source.topic, source.partition)))
        now = datetime.now(UTC)
        index_rows = [r for r in rows if r.stage == INDEX_STAGE]
        deep_rows = [r for r in rows if r.stage == DEEP_INDEX_STAGE]
        projector_rows = [r for r in rows if r.stage not in INDEX_STAGES]
        return (
            projection_lag(source.topic, source.partition, projector_rows, now, self.heartbeat_stale_s),
            projection_lag(source.topic, source.partition, index_rows, now, self.heartbeat_stale_s),
            projection_lag(source.topic, source.partition, deep_rows, now, self.heartbeat_stale_s),
        )


def projection_lag(topic: str, partition: int, rows: Sequence[Any], now: datetime, stale_s: float) -> ProjectionLag:
    """The lag of the furthest-behind consumer group among heartbeat ``rows`` (pure; see ``ProjectionLag``).

    No rows: unknown (``known=False``), for the topic and partition.
    """
    worst: ProjectionLag | None = None
    for r in rows:
        updated = _utc(r.updated_at) if r.updated_at else EPOCH
        caught_up = _utc(r.caught_up_at) if r.caught_up_at else EPOCH
        behind = max(0, (r.log_end_offset or 0) - (r.next_offset or 0))
        age = max(0.0, (now - updated).total_seconds())
        seconds = 0.0 if behind == 0 and age <= stale_s else age
        if behind:
            seconds = max(seconds, (now - caught_up).total_seconds())
        lag = ProjectionLag(topic=topic, partition=partition, events_behind=behind, seconds_behind=round(seconds, 3),
                            heartbeat_age_s=round(age, 3), known=True)  # fmt: skip
        if worst is None or (lag.seconds_behind, lag.events_behind) > (worst.seconds_behind, worst.events_behind):
            worst = lag
    return worst if worst is not None else ProjectionLag(topic=topic, partition=partition)


def _utc(dt: datetime) -> datetime:
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt


class _Run:
    """The state of one ``read`` call."""

    def __init__(self, reader: ContextReader, key: SessionKey, filter_key: str) -> None:
        self.r = reader
        self.key = key
        self.pk = tuple(key)
        self.filter_key = filter_key
        self.got = _Collected()
        self.tail_ids: list[str] = []
        self.turn_rows: dict[str, list[Any]] = {}
        self.boundary_id: str | None = None
        """The boundary event's id, when the boundary is exact (kept even when the key does not see it)."""
        self.queries = 0
        self.rows = 0
        self.served_epoch = 0
        self.truncated = False
        """A bounded scan of the events after the boundary (or of the whole history) stopped at ``max_events``."""
        self.current_unread = False
        """A bounded scan back for the current user message stopped at ``max_events`` (``ReadStats``)."""

    async def q(self, stmt: PreparedStatement, params: Sequence[object]) -> list[Any]:
        self.queries += 1
        return list(await aexecute(self.r._s, stmt, params))

    async def q_all(self, stmt: PreparedStatement, params: Sequence[object]) -> list[Any]:
        self.queries += 1
        return await afetch_all(self.r._s, stmt, params)

    def keep(self, row: Any) -> bool:
        return visible(row.filter_key or "", self.filter_key)

    def shown(self, event: SessionEvent) -> bool:
        """Whether ``event`` is one of the key's complete events (not a boundary event kept as a marker only)."""
        return not event.partial and visible(event.filter_key, self.filter_key)

    async def summary(self) -> AppliedSummary | None:
        rows = await self.q(self.r._summaries, self.pk)
        # The static column: also on the one row a session whose switch left it no heads returns.
        self.served_epoch = next((r.served_epoch for r in rows if r.served_epoch is not None), 0)
        records = [stored_summary(r.summary_json) for r in rows if r.summary and r.summary_json]
        return applicable_summary(records, self.filter_key)

    async def cut(self, applied: AppliedSummary | None) -> Cut | None:
        if applied is None:
            return None
        boundary = applied.boundary
        if boundary.last_event_id:
            row = next(iter(await self.q(self.r._event_pos, (*self.pk, boundary.last_event_id))), None)
            if row is not None and row.seq is not None:
                self.boundary_id = boundary.last_event_id
                return Cut.of(boundary.cutoff_at, (_utc(row.ts), row.seq))
        return Cut.of(boundary.cutoff_at)

    async def tail(self, cut: Cut | None) -> None:
        """Events from the boundary to the end (``truncated`` when ``max_events`` stopped a scan).

        The scan by time from :attr:`Cut.scan_from`, newest first, and beside it
        the late events logged after an exact boundary's event; then the
        boundary event itself if the scan did not hold it.
        """
        if cut is None or cut.anchor_seq is None:
            await self._scan_tail(cut)
            return
        _, rows = await asyncio.gather(self._scan_tail(cut), self._late(cut.anchor_seq, _LAST_SEQ))
        if len(rows) >= self.r.max_events:
            self.truncated = True
        await self._fetch_at([(r.ts, r.event_id) for r in rows if self.keep(r) and not r.partial], tail=True)
        if self.boundary_id is not None and self.boundary_id not in self.got.events:
            await self._by_id(self.boundary_id, marker=True)

    async def _scan_tail(self, cut: Cut | None) -> None:
        lower = (cut.scan_from, "") if cut is not None else (EPOCH, "")
        page = self.r.page_size
        rows = await self.q(self.r._tail_first, (*self.pk, *lower, page))
        seen = 0
        while True:
            for row in rows:
                seen += 1
                self.rows += 1
                if self.keep(row) and not row.partial:
                    self.tail_ids.append(self.got.add(row).event_id)
                elif row.event_id == self.boundary_id:
                    self.got.add(row)  # where the summary ends, though the key does not show it
            if len(rows) < page:
                return
            if seen >= self.r.max_events:
                self.truncated = True
                return
            last = rows[-1]
            rows = await self.q(self.r._tail_next, (*self.pk, *lower, last.ts, last.event_id, page))

    async def _late(self, after_seq: int, upto_seq: int) -> list[Any]:
        """The ``late_events`` rows logged after ``after_seq`` and up to ``upto_seq``, newest first
        (at most ``max_events``)."""
        rows = await self.q(self.r._late, (*self.pk, after_seq, upto_seq, self.r.max_events))
        self.rows += len(rows)
        return rows

    async def current(self, current_event_id: str | None, cut: Cut | None) -> SessionEvent | None:
        """The user message being answered: the one named, else the key's latest user turn in log order."""
        if current_event_id is not None:
            return await self._by_id(current_event_id, required=True)
        found = self._latest_user_turn()
        if cut is None:
            return found  # the whole history was read
        if found is None:
            found = await self._scan_back(cut)
        if found is not None and cut.anchor_seq is not None and self.got.events[found.event_id][0].seq > cut.anchor_seq:
            return found  # after the boundary: the late events after it are read already
        # A late user turn logged after the one found lies before the scans' reach: it is in late_events.
        after = -1 if found is None else self.got.events[found.event_id][0].seq
        upto = cut.anchor_seq if cut.anchor_seq is not None else _LAST_SEQ
        rows = await self._late(after, upto)
        if len(rows) >= self.r.max_events:
            self.current_unread = True
        await self._fetch_at([(r.ts, r.event_id) for r in rows if r.role == "user" and self.keep(r) and not r.partial])
        return self._latest_user_turn()

    async def _scan_back(self, cut: Cut) -> SessionEvent | None:
        """Scan back from the boundary to the latest visible user turn (the covered head of the current run)."""
        position: tuple[datetime, str] = (cut.scan_from, "")
        page = self.r.page_size
        seen = 0
        while True:
            if seen >= self.r.max_events:
                # No visible user turn within ``max_events`` before the boundary: bounded like the tail.
                self.current_unread = True
                return None
            limit = min(page, self.r.max_events - seen)
            rows = await self.q(self.r._before, (*self.pk, *position, limit))
            for row in rows:
                seen += 1
                self.rows += 1
                if self.keep(row) and not row.partial:
                    event = self.got.add(row)
                    if is_prompt_user_turn(event):
                        # Same-timestamp rows may come later in log order: read them all.
                        for same in await self.q(self.r._at_ts, (*self.pk, row.ts)):
                            if self.keep(same) and not same.partial:
                                self.got.add(same)
                        return self._latest_user_turn()
            if len(rows) < limit:
                return None
            position = (rows[-1].ts, rows[-1].event_id)

    def _latest_user_turn(self) -> SessionEvent | None:
        for event in reversed(self.got.ordered()):
            if is_prompt_user_turn(event) and self.shown(event):
                return event
        return None

    async def _by_id(self, event_id: str, *, required: bool = False, marker: bool = False) -> SessionEvent | None:
        """The stored event ``event_id``, added; ``required``: raise when absent; ``marker``: added though
        the key does not see it (the boundary event). Else only a visible, complete event is added."""
        found = self.got.events.get(event_id)
        if found is not None:
            return found[1]
        pos = next(iter(await self.q(self.r._event_pos, (*self.pk, event_id))), None)
        row = None if pos is None else next(iter(await self.q(self.r._at, (*self.pk, pos.ts, event_id))), None)
        if row is None:
            if required:
                raise AnchorNotFound(f"anchor event not found: {event_id}")
            return None
        if not (required or marker) and (not self.keep(row) or row.partial):
            return None
        return self.got.add(row)

    async def late_calls(self) -> None:
        """The covered call events tail tool results answer (:func:`pair_rows`: ids reused across turns pair
        within their turn).

        A tail result answered by a tail call before it, no other result of its id between, is paired
        within the read. The others are paired over every call and result of their ids
        (``tool_call_events``); an id that table holds no call of (projected before it existed) takes its
        latest call (``tool_calls``), as before.
        """
        ids = list(dict.fromkeys(self._unpaired_in_tail()))
        if not ids:
            return
        chunks = [ids[start : start + _IN_CHUNK] for start in range(0, len(ids), _IN_CHUNK)]
        rows = [r for found in await asyncio.gather(*(self.q(self.r._call_events, (*self.pk, c)) for c in chunks))
                for r in found]  # fmt: skip
        self.rows += len(rows)
        shown = [r for r in rows if self.keep(r) and not r.partial]
        pairs = pair_rows(shown)
        calls = [pairs[event_id] for event_id in self.tail_ids if event_id in pairs]
        wanted = [(r.ts, r.event_id) for r in calls if r.event_id not in self.got.events]
        indexed = {r.tool_call_id for r in shown if r.role == "assistant" and r.tool_name}
        old = [i for i in ids if i not in indexed]
        wanted += [(r.call_ts, r.call_event_id) for start in range(0, len(old), _IN_CHUNK)
                   for r in await self.q(self.r._calls, (*self.pk, old[start : start + _IN_CHUNK]))
                   if r.call_event_id and r.call_ts]  # fmt: skip
        await self._fetch_at(wanted)

    def _unpaired_in_tail(self) -> list[str]:
        """The ids of tail results the pairing rule (:mod:`schemas.pairing`) over the events read does not pair
        with a tail call: a result that finds every call of its id in the read answered may answer a call
        the read lacks, so it counts as unpaired too."""
        tail = set(self.tail_ids)
        events = [event for event in self.got.ordered() if self.shown(event)]
        pairing = pair_steps(map(_event_step, events))
        out: list[str] = []
        for i, event in enumerate(events):
            if event.event_id not in tail or event.message.role != "tool" or not event.message.tool_call_id:
                continue
            call = pairing.answers.get(i)
            if call is None or i in pairing.replacing or events[call].event_id not in tail:
                out.append(event.message.tool_call_id)
        return out

    async def _fetch_at(self, positions: Sequence[tuple[datetime, str]], *, tail: bool = False) -> None:
        """The visible, complete events at ``positions`` (one ``IN`` query per chunk), added (``tail``: as
        events after the boundary)."""
        wanted = list(dict.fromkeys(p for p in positions if p[1] not in self.got.events))
        chunks = [wanted[i : i + _IN_CHUNK] for i in range(0, len(wanted), _IN_CHUNK)]
        for rows in await asyncio.gather(*(self.q(self.r._at_many, (*self.pk, chunk)) for chunk in chunks)):
            for row in rows:
                self.rows += 1
                if self.keep(row) and not row.partial:
                    event = self.got.add(row)
                    if tail:
                        self.tail_ids.append(event.event_id)

    async def _turn_index(self, invocation_id: str, request_id: str | None = None) -> list[Any]:
        if request_id is None:
            rows = await self.q_all(self.r._invocation, (*self.pk, invocation_id))
            self.turn_rows[invocation_id] = rows
            return rows
        cached = self.turn_rows.get(invocation_id)
        if cached is not None:
            return [r for r in cached if r.request_id == request_id]
        return await self.q_all(self.r._turn, (*self.pk, invocation_id, request_id))

    async def _fetch_rows(self, rows: Iterable[Any]) -> None:
        await self._fetch_at([(r.ts, r.event_id) for r in rows if self.keep(r) and not r.partial])

    async def invocation(self, current: SessionEvent | None) -> None:
        """The covered assistant/tool events of the current invocation (the resume tail's candidates)."""
        if current is None or not current.invocation_id:
            return
        rows = await self._turn_index(current.invocation_id)
        await self._fetch_rows(r for r in rows if r.role in ("assistant", "tool"))

    async def anchors(self, cut: Cut) -> None:
        """The covered user messages of each collected turn that may need its question brought back."""
        first: dict[tuple[str, str], SessionEvent] = {}
        first_pos: dict[tuple[str, str], _Pos] = {}
        for pos, event in sorted(self.got.events.values(), key=lambda pe: pe[0]):
            turn = (event.invocation_id, event.request_id)
            if turn != ("", "") and turn not in first and self.shown(event):
                first[turn], first_pos[turn] = event, pos
        needed = [
            turn for turn, event in first.items()
            if not (is_prompt_user_turn(event) and _surely_after(cut, first_pos[turn]))
        ]  # fmt: skip
        indexes = await asyncio.gather(*(self._turn_index(inv, req) for inv, req in needed))
        await self._fetch_rows(r for rows in indexes for r in rows if r.role == "user")


def pair_rows(rows: Iterable[Any]) -> dict[str, Any]:
    """Result event id → the row of the call it answers, over ``tool_call_events`` rows a key sees.

    The rule of :mod:`schemas.pairing` (the full history's, ``streams.context.pairing.pair_results``), in
    log order. A call counts when named (a prompt drops unnamed calls); results are role ``tool``.
    """
    ordered = sorted(rows, key=lambda r: (r.seq, r.event_id))
    steps = [
        ((r.tool_call_id,) if r.tool_name else None) if r.role == "assistant"
        else r.tool_call_id if r.role == "tool" else None
        for r in ordered
    ]  # fmt: skip
    return {ordered[r].event_id: ordered[c] for r, c in pair_steps(steps).answers.items()}


def _event_step(event: SessionEvent) -> Step:
    """A shown event as a position of the pairing rule: its named calls, or the call id it answers."""
    msg = event.message
    if msg.role == "assistant":
        return [c.id for c in msg.tool_calls if c.function.name]
    if msg.role == "tool" and msg.tool_call_id:
        return msg.tool_call_id
    return None


def _surely_after(cut: Cut, pos: _Pos) -> bool:
    """Whether an event at ``pos`` is after the boundary whatever else the read holds: logged after an
    exact boundary's event, else stamped after the cutoff (strictly: an event in the cutoff's millisecond
    may be a microsecond before it)."""
    if cut.anchor_seq is not None:
        return pos.seq > cut.anchor_seq
    return pos.ts > cut.cutoff_at


__all__ = [
    "ContextReader",
    "ancestors_nearest_first",
    "applicable_summary",
    "is_prompt_user_turn",
    "pair_rows",
    "projection_lag",
    "visible",
]  # fmt: skip
