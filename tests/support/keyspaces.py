"""Migrated Cassandra keyspaces for tests, reused: leased empty, truncated when given back.

Creating a keyspace runs every migration (some 30 schema statements) and dropping it
is a schema change too; Cassandra applies schema changes one at a time, so with test
files running in parallel they queue behind each other (a ``CREATE KEYSPACE`` waited
over 10 s). Truncating the tables of a keyspace a test is done with takes a fraction of
that and changes no schema. Each test process keeps its own pool and drops its
keyspaces at the end.
"""

from __future__ import annotations

import uuid

from cassandra.cluster import Cluster, Session

from projections.cassandra_session import connect
from projections.migrations import apply_migrations
from schemas.settings import CassandraSettings

_KEEP = {"schema_migrations"}
"""Tables a returned keyspace keeps (which migrations it has)."""


class KeyspacePool:
    def __init__(self, settings: CassandraSettings) -> None:
        self.settings = settings
        self._cluster: Cluster | None = None
        self._session: Session | None = None
        self._free: list[str] = []
        self._made: list[str] = []

    def _connect(self) -> Session:
        if self._session is None:
            self._cluster, self._session = connect(self.settings)
        return self._session

    def lease(self) -> str:
        """The name of a migrated keyspace with empty tables, for one test."""
        if self._free:
            return self._free.pop()
        name = f"t_{uuid.uuid4().hex[:12]}"
        apply_migrations(self._connect(), self.settings.model_copy(update={"keyspace": name}))
        self._made.append(name)
        return name

    def release(self, name: str) -> None:
        """Empty ``name``'s tables and keep it for the next lease (forgotten if the test dropped it)."""
        session = self._connect()
        rows = session.execute(
            "SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s", (name,), timeout=30
        )
        tables = [r.table_name for r in rows]
        if not tables:
            if name in self._made:
                self._made.remove(name)
            return
        for table in tables:
            if table not in _KEEP:
                session.execute(f"TRUNCATE {name}.{table}", timeout=self.settings.schema_timeout_s)
        self._free.append(name)

    def close(self) -> None:
        """Drop every keyspace this pool made."""
        if self._session is not None:
            for name in self._made:
                self._session.execute(f"DROP KEYSPACE IF EXISTS {name}", timeout=self.settings.schema_timeout_s)
        if self._cluster is not None:
            self._cluster.shutdown()
        self._made.clear()
        self._free.clear()
