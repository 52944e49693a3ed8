"""Which sessions the projections hold, and how far each projector group has read (for ``distill ui``).

The tables are partitioned by session, so listing sessions is a scan of the
partition keys of ``events_by_session`` (``SELECT DISTINCT``), capped at
``scan_limit`` partitions: a browsing aid for operators, never a hot path.
Counts per session come from :meth:`SessionReader.session_stats` and the
summary keys from :meth:`SessionReader.list_summaries`, asked only for the
sessions a page shows.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime

from cassandra.cluster import Session
from cassandra.query import SimpleStatement

from projections.cassandra_paging import afetch_all
from projections.read_api import SessionReader
from schemas import SessionKey

DEFAULT_SCAN_LIMIT = 5000


@dataclass(frozen=True)
class SessionOverview:
    """One session as the session list shows it."""

    key: SessionKey
    events: int
    tokens: int
    content_bytes: int
    first_event_at: datetime | None
    last_event_at: datetime | None
    summaries: tuple[tuple[str, int], ...]
    """``(filter_key, latest version)`` of every summary key, by key."""


@dataclass(frozen=True)
class ProjectorOffset:
    """The next offset a projector group will read from one partition (stored with the rows it wrote)."""

    consumer_group: str
    topic: str
    partition: int
    next_offset: int
    updated_at: datetime | None


class SessionCatalog:
    """Session discovery over one keyspace (shares the ``SessionReader``'s driver session)."""

    def __init__(self, session: Session, keyspace: str, reader: SessionReader) -> None:
        self._s = session
        self._reader = reader
        self._keys_cql = f"SELECT DISTINCT app_name, user_id, session_id FROM {keyspace}.events_by_session"
        self._offsets = SimpleStatement(
            f"SELECT consumer_group, topic, partition, next_offset, updated_at FROM {keyspace}.projector_offsets"
        )

    async def session_keys(self, scan_limit: int = DEFAULT_SCAN_LIMIT) -> tuple[list[SessionKey], bool]:
        """Up to ``scan_limit`` session keys (token order) and whether the scan stopped at the limit."""
        statement = SimpleStatement(f"{self._keys_cql} LIMIT {int(scan_limit) + 1}", fetch_size=1000)
        rows = await afetch_all(self._s, statement)
        keys = [SessionKey(r.app_name, r.user_id, r.session_id) for r in rows]
        return keys[:scan_limit], len(keys) > scan_limit

    async def overview(self, key: SessionKey) -> SessionOverview:
        """Counts, first/last activity and the summary keys with their latest versions."""
        stats, summaries = await asyncio.gather(self._reader.session_stats(key), self._reader.list_summaries(key))
        return SessionOverview(
            key=key, events=stats["events"], tokens=stats["tokens"], content_bytes=stats["content_bytes"],
            first_event_at=stats["first_event_at"], last_event_at=stats["last_event_at"],
            summaries=tuple((s.filter_key, s.version) for s in summaries),
        )  # fmt: skip

    async def overviews(self, keys: list[SessionKey]) -> list[SessionOverview]:
        return list(await asyncio.gather(*(self.overview(k) for k in keys)))

    async def projector_offsets(self) -> list[ProjectorOffset]:
        """Every stored projector offset (a small table: groups × topics × partitions)."""
        rows = await afetch_all(self._s, self._offsets)
        return [
            ProjectorOffset(r.consumer_group, r.topic, r.partition, r.next_offset, r.updated_at)
            for r in sorted(rows, key=lambda r: (r.consumer_group, r.topic, r.partition))
        ]
