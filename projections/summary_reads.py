"""Summary reads: the stored summaries of a session, for display and for prompts, and their cuts.

The base of the read API (:class:`projections.read_api.SessionReader`): it holds the
session, the keyspace and the prepared statements; :mod:`projections.event_windows`
and :mod:`projections.recall_search` build on it. Every query names ``(app_name,
user_id)`` in its partition key, so no read can return another tenant's rows.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cassandra.cluster import Session
from cassandra.query import PreparedStatement

from projections.boundary import Cut
from projections.cassandra_paging import afetch_all
from projections.cassandra_session import aexecute
from projections.embedding import Embedder
from projections.summary_selection import (
    SelectedSummary,
    SummaryCut,
    select_for_display,
    select_for_prompt,
)
from schemas import SessionKey, SessionSummary
from schemas.summaries import stored_summary


def _utc(dt: datetime) -> datetime:
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt


@dataclass(frozen=True)
class StoredSummary:
    """A summary row: the text, its version and boundary, and the full record."""

    filter_key: str
    version: int
    summary: str
    cutoff_at: datetime
    last_event_id: str | None
    created_at: datetime | None
    record: SessionSummary

    @property
    def epoch(self) -> int:
        """The line the summary belongs to (``schemas.epochs``; 0: the live line)."""
        return self.record.epoch


SESSION_PK = "app_name = ? AND user_id = ? AND session_id = ?"
"""The WHERE clause naming one session's partition (every read of the read side names its tenant)."""


class SummaryReads:
    """Summary reads over the projections of one keyspace (statements prepared at construction: blocking)."""

    def __init__(self, session: Session, keyspace: str, *, embedder: Embedder | None = None) -> None:
        self._s = session
        self._ks = keyspace
        self._embedder = embedder
        self._cache: dict[str, PreparedStatement] = {}
        pk = SESSION_PK
        ks = keyspace
        self._summary_one = self._prep(f"SELECT * FROM {ks}.summaries_latest WHERE {pk} AND filter_key = ?")
        self._summary_all = self._prep(f"SELECT * FROM {ks}.summaries_latest WHERE {pk}")
        self._history = self._prep(f"SELECT * FROM {ks}.summaries_history WHERE {pk} AND filter_key = ?")
        self._history_all = self._prep(f"SELECT * FROM {ks}.summaries_history WHERE {pk}")
        self._epoch_history = self._prep(f"SELECT * FROM {ks}.summaries_epoch_history WHERE {pk}")
        self._event_id = self._prep(f"SELECT ts, seq FROM {ks}.event_ids WHERE {pk} AND event_id = ?")

    def _prep(self, cql: str) -> PreparedStatement:
        stmt = self._cache.get(cql)
        if stmt is None:
            stmt = self._cache[cql] = self._s.prepare(cql)
        return stmt

    async def _prep_async(self, cql: str) -> PreparedStatement:
        stmt = self._cache.get(cql)
        if stmt is None:
            stmt = await asyncio.to_thread(self._s.prepare, cql)
            self._cache[cql] = stmt
        return stmt

    async def get_summary(self, key: SessionKey, filter_key: str = "") -> StoredSummary | None:
        """The stored summary for ``filter_key`` with the guide's fallback order (for display, not for a prompt).

        1. the summary of ``filter_key`` itself;
        2. else the full-session summary (``""``);
        3. else any available summary: the one covering the most recent events
           (latest ``cutoff_at``, then newest ``created_at``, then key order),
           because the freshest summary hides the least from the agent.

        The Go code stops after step 2; the guide (our spec) documents step 3,
        so it is included. ``None`` when the session has no summary at all.
        """
        rows = _heads(await aexecute(self._s, self._summary_all, tuple(key)))
        found = {r.filter_key: r for r in rows if r.summary}
        for wanted in (filter_key, ""):
            if wanted in found:
                return _summary(found[wanted])
        if not found:
            return None
        best = max(
            found.values(),
            key=lambda r: (_utc(r.cutoff_at), _utc(r.created_at) if r.created_at else datetime.min.replace(tzinfo=UTC),
                           [-ord(c) for c in r.filter_key]),
        )  # fmt: skip
        return _summary(best)

    async def get_summary_view(self, key: SessionKey, filter_key: str = "") -> SelectedSummary | None:
        """The summary a prompt for ``filter_key`` injects and cuts its history at.

        The key's own summary, else its nearest ancestor's, else the full
        session's (``projections.summary_selection.select_for_prompt``); never
        an unrelated branch's or a descendants' aggregate, which did not see
        the key's events. ``None``: inject nothing, cut nothing. ``source`` on
        the result says which rule answered. Pass it as ``summary=`` to
        :meth:`events_after_boundary` for the events the next prompt must add.
        """
        rows = _heads(await aexecute(self._s, self._summary_all, tuple(key)))
        return select_for_prompt((_cut(r) for r in rows), filter_key)

    async def get_summary_text(self, key: SessionKey, filter_key: str = "") -> str | None:
        """A summary text to *show* for ``filter_key``, in the guide's fallback order; ``None`` when there is none.

        1. the summary of ``filter_key`` itself;
        2. else, for a branch key, the prefix aggregate of its subtree (the
           descendants' summaries by key, joined by a blank line);
        3. else the full-session summary (``""``);
        4. else the freshest summary of any key.

        For display (``distill show``, a UI): the text may be another
        branch's. A prompt uses :meth:`get_summary_view`, which never is.
        """
        rows = _heads(await aexecute(self._s, self._summary_all, tuple(key)))
        found = select_for_display((_cut(r) for r in rows), filter_key)
        return found.summary if found else None

    async def latest_summary(self, key: SessionKey, filter_key: str = "") -> StoredSummary | None:
        """The latest summary of exactly ``filter_key`` (no fallback)."""
        rows = await aexecute(self._s, self._summary_one, (*key, filter_key))
        row = next(iter(rows), None)
        return _summary(row) if row is not None else None

    async def list_summaries(self, key: SessionKey) -> list[StoredSummary]:
        """The latest summary of every filter key of the session, by key."""
        rows = _heads(await aexecute(self._s, self._summary_all, tuple(key)))
        return sorted((_summary(r) for r in rows), key=lambda s: s.filter_key)

    async def summary_history(
        self, key: SessionKey, filter_key: str | None = None, *, epoch: int | None = None
    ) -> list[StoredSummary]:
        """Every stored version of ``filter_key`` (of every key when ``None``) on every epoch, or on ``epoch``.

        Ordered by ``(epoch, version)``, newest first (then by key). Epoch 0 is
        read from ``summaries_history``, the others from ``summaries_epoch_history``.
        """
        zero: list[Any] = []
        if epoch in (None, 0):
            if filter_key is None:
                zero = await afetch_all(self._s, self._history_all, tuple(key))
            else:
                zero = await afetch_all(self._s, self._history, (*key, filter_key))
        others: list[Any] = []
        if epoch != 0:
            rows = await afetch_all(self._s, self._epoch_history, tuple(key))
            others = [r for r in rows if filter_key in (None, r.filter_key) and epoch in (None, r.epoch)]
        out = [_summary(r) for r in (*zero, *others)]
        return sorted(out, key=lambda h: (-h.epoch, -h.version, h.filter_key))

    async def resolve_cut(self, key: SessionKey, cutoff_at: datetime, last_event_id: str | None) -> Cut:
        """The boundary as stored positions: exact when ``last_event_id`` is a stored event."""
        if last_event_id:
            row = next(iter(await aexecute(self._s, self._event_id, (*key, last_event_id))), None)
            if row is not None:
                return Cut.of(cutoff_at, (_utc(row.ts), row.seq))
        return Cut.of(cutoff_at)


def _heads(rows: Iterable[Any]) -> list[Any]:
    """The ``summaries_latest`` rows of a session that hold a summary.

    A session an epoch switch left without heads still has its static columns
    (``served_epoch``): Cassandra returns them as one row whose key columns are null.
    """
    return [r for r in rows if r.filter_key is not None]


def _cut(row: Any) -> SummaryCut:
    created = getattr(row, "created_at", None)
    return SummaryCut(
        row.filter_key, row.summary or "", _utc(row.cutoff_at), row.last_event_id, _utc(created) if created else None
    )


def _summary(row: Any) -> StoredSummary:
    return StoredSummary(
        filter_key=row.filter_key, version=row.version, summary=row.summary or "", cutoff_at=_utc(row.cutoff_at),
        last_event_id=row.last_event_id, created_at=_utc(row.created_at) if row.created_at else None,
        record=stored_summary(row.summary_json),
    )  # fmt: skip
