"""The read side of summary epochs: which epoch a session is served from, every epoch it has, its switches.

``summaries_latest`` already holds the served epoch's heads (a switch replaces
them at once, see ``projections.projector``), so prompts and displays need
nothing from here; this is for listing (``distill show --epochs``) and for
choosing an epoch to switch to. :func:`epoch_views` is pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cassandra.cluster import Session

from projections.cassandra_paging import afetch_all
from projections.cassandra_session import aexecute
from projections.read_api import SessionReader, StoredSummary
from schemas import SessionKey


@dataclass(frozen=True)
class Adoption:
    """One switch of a session to ``epoch`` (its position on the summaries topic)."""

    record_offset: int
    topic: str
    partition: int
    epoch: int
    previous_epoch: int
    command_id: str
    caught_up: bool
    keys: int
    source: str
    created_at: datetime | None


@dataclass(frozen=True)
class EpochView:
    """One epoch of a session: its latest summary per key, how many versions, whether it is served."""

    epoch: int
    served: bool
    heads: tuple[StoredSummary, ...]
    versions: int
    last_created_at: datetime | None
    adopted_at: datetime | None
    """When the session last switched to it (``None``: never, or epoch 0 before any switch)."""


def epoch_views(history: Iterable[StoredSummary], served_epoch: int, adoptions: Sequence[Adoption]) -> list[EpochView]:
    """Group ``history`` by epoch (ascending); the served epoch is listed even without a version."""
    by_epoch: dict[int, dict[str, StoredSummary]] = {}
    counts: dict[int, int] = {}
    latest: dict[int, datetime] = {}
    for h in history:
        heads = by_epoch.setdefault(h.epoch, {})
        current = heads.get(h.filter_key)
        if current is None or current.version < h.version:
            heads[h.filter_key] = h
        counts[h.epoch] = counts.get(h.epoch, 0) + 1
        if h.created_at is not None and (h.epoch not in latest or latest[h.epoch] < h.created_at):
            latest[h.epoch] = h.created_at
    by_epoch.setdefault(served_epoch, {})
    switched: dict[int, datetime | None] = {}
    for a in sorted(adoptions, key=lambda a: a.record_offset):
        switched[a.epoch] = a.created_at
    views = []
    for e, heads in sorted(by_epoch.items()):
        view = EpochView(
            epoch=e, served=e == served_epoch, heads=tuple(heads[k] for k in sorted(heads)),
            versions=counts.get(e, 0), last_created_at=latest.get(e), adopted_at=switched.get(e),
        )  # fmt: skip
        views.append(view)
    return views


class EpochReader:
    """Queries over the epoch tables of one keyspace (statements prepared here: blocking)."""

    def __init__(self, session: Session, keyspace: str, reader: SessionReader | None = None) -> None:
        self._s = session
        self._reader = reader or SessionReader(session, keyspace)
        pk = "app_name = ? AND user_id = ? AND session_id = ?"
        self._served = session.prepare(f"SELECT served_epoch FROM {keyspace}.summaries_latest WHERE {pk} LIMIT 1")
        self._adoptions = session.prepare(f"SELECT * FROM {keyspace}.summary_adoptions WHERE {pk}")

    async def served_epoch(self, key: SessionKey) -> int:
        """The epoch the session is served from (0 until it switched)."""
        row = next(iter(await aexecute(self._s, self._served, tuple(key))), None)
        return (row.served_epoch or 0) if row is not None else 0

    async def adoptions(self, key: SessionKey) -> list[Adoption]:
        """Every switch of the session, newest first."""
        rows = await afetch_all(self._s, self._adoptions, tuple(key))
        return [_adoption(r) for r in rows]

    async def epochs(self, key: SessionKey) -> list[EpochView]:
        """Every epoch of the session that holds a summary (and the served one), by epoch."""
        history = await self._reader.summary_history(key)
        return epoch_views(history, await self.served_epoch(key), await self.adoptions(key))


def _adoption(r: Any) -> Adoption:
    return Adoption(
        record_offset=r.record_offset, topic=r.topic or "", partition=r.partition or 0, epoch=r.epoch or 0,
        previous_epoch=r.previous_epoch or 0, command_id=r.command_id or "", caught_up=bool(r.caught_up),
        keys=r.keys or 0, source=r.source or "", created_at=r.created_at.replace(tzinfo=UTC) if r.created_at else None,
    )  # fmt: skip


__all__ = ["Adoption", "EpochReader", "EpochView", "epoch_views"]
