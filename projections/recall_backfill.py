"""Backfill of migration 008: the session token (``lexical.session_token``) into rows indexed before it.

From 008 on the indexer writes every ``recall_docs`` / ``recall_chunks`` row with its session's token,
and the session scopes of ``session_search`` require it (``tokens CONTAINS``): a row indexed before would
no longer be found. ``apply_migrations`` runs this once, right after 008, and records the migration only
when it is done (an interrupted run is simply run again: adding a set element is idempotent).

Each token is added at its row's own write time (``USING TIMESTAMP WRITETIME(role)``), never later: a
session deleted before or while this runs stays deleted (the deletion is the later write, and at a tie
Cassandra's tombstone wins), so the backfill can neither resurrect a row nor leave one behind with only
its token. A row the indexer writes again meanwhile carries the token already.
"""

from __future__ import annotations

from cassandra.cluster import Session
from cassandra.concurrent import execute_concurrent_with_args
from cassandra.query import PreparedStatement, SimpleStatement

from projections.lexical import session_token

_KEYS = {
    "recall_docs": ("app_name", "user_id", "session_id", "ts", "event_id"),
    "recall_chunks": ("app_name", "user_id", "session_id", "ts", "event_id", "chunk"),
}


def backfill_session_tokens(
    session: Session, keyspace: str, *, page_size: int = 500, concurrency: int = 32, timeout: float = 60.0
) -> int:
    """Add each recall row's session token to its ``tokens``; returns the rows updated. Blocking."""
    updated = 0
    for table, keys in _KEYS.items():
        where = " AND ".join(f"{k} = ?" for k in keys)
        update = session.prepare(
            f"UPDATE {keyspace}.{table} USING TIMESTAMP ? SET tokens = tokens + ? WHERE {where}"
        )
        select = SimpleStatement(f"SELECT {', '.join(keys)}, WRITETIME(role) AS written FROM {keyspace}.{table}",
                                 fetch_size=page_size)  # fmt: skip
        page: list[tuple[object, ...]] = []
        for row in session.execute(select, timeout=timeout):
            if row.written is None:
                continue  # no role cell: not a row the indexer wrote (it always sets one)
            page.append((row.written, {session_token(row.session_id)}, *row[: len(keys)]))
            if len(page) >= page_size:
                updated += _write(session, update, page, concurrency)
                page = []
        if page:
            updated += _write(session, update, page, concurrency)
    return updated


def _write(session: Session, update: PreparedStatement, page: list[tuple[object, ...]], concurrency: int) -> int:
    results = execute_concurrent_with_args(session, update, page, concurrency=concurrency, raise_on_first_error=False)
    for ok, result in results:
        if not ok:
            raise result
    return len(page)
