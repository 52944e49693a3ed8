"""Migrated Cassandra keyspaces for tests, reused: leased empty, truncated when given back.

Creating a keyspace runs every migration (some 30 schema statements) and dropping it
is a schema change too; Cassandra applies schema changes one at a time, so with test
files running in parallel they queue behind each other (a ``CREATE KEYSPACE`` waited
over 10 s). Truncating the tables of a keyspace a test is done with takes a fraction of
that and changes no schema, and only the tables a test wrote to are truncated (a
run truncated 1,656 tables one by one, most of them never written). Each test process
keeps its own pool and drops its keyspaces at the end.
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
        self._writes_at_lease: dict[str, dict[str, int]] = {}

    def _connect(self) -> Session:
        if self._session is None:
            self._cluster, self._session = connect(self.settings)
        return self._session

    def lease(self) -> str:
        """The name of a migrated keyspace with empty tables, for one test."""
        if self._free:
            name = self._free.pop()
        else:
            name = f"t_{uuid.uuid4().hex[:12]}"
            apply_migrations(self._connect(), self.settings.model_copy(update={"keyspace": name}))
            self._made.append(name)
        self._writes_at_lease[name] = self._writes(name)
        return name

    def _writes(self, name: str) -> dict[str, int]:
        """Mutations each table of ``name`` has applied since the node started (deletions included)."""
        rows = self._connect().execute(
            "SELECT table_name, count FROM system_views.local_write_latency WHERE keyspace_name = %s",
            (name,), timeout=30,
        )  # fmt: skip
        return {r.table_name: int(r.count) for r in rows}

    def release(self, name: str) -> None:
        """Empty the tables of ``name`` that were written since its lease; keep it for the next lease.

        A table counts as written when its node-local write count moved, which also
        catches a test that only deleted (its tombstones would shadow the next test's
        older-timestamped writes). Forgotten if the test dropped the keyspace.
        """
        session = self._connect()
        before = self._writes_at_lease.pop(name, {})
        now = self._writes(name)
        if not now:
            if name in self._made:
                self._made.remove(name)
            return
        restarted = any(now.get(table, 0) < count for table, count in before.items())
        written = [
            table for table, count in now.items()
            if table not in _KEEP and (restarted or table not in before or count != before[table])
        ]  # fmt: skip
        futures = [
            session.execute_async(f"TRUNCATE {name}.{table}", timeout=self.settings.schema_timeout_s)
            for table in written
        ]
        for future in futures:
            future.result()
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
