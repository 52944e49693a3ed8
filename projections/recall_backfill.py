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

from collections.abc import Sequence
from typing import Any

from cassandra.cluster import Session
from cassandra.concurrent import execute_concurrent_with_args
from cassandra.query import SimpleStatement

from projections.lexical import session_token

KEYS = {
    "recall_docs": ("app_name", "user_id", "session_id", "ts", "event_id"),
    "recall_chunks": ("app_name", "user_id", "session_id", "ts", "event_id", "chunk"),
}
"""The primary key columns of each recall table, in order."""


def backfill_session_tokens(
    session: Session, keyspace: str, *, page_size: int = 500, concurrency: int = 32, timeout: float = 60.0
) -> int:
    """Add each recall row's session token to its ``tokens``; returns the rows updated. Blocking."""
    updated = 0
    for table, keys in KEYS.items():
        select = SimpleStatement(f"SELECT {', '.join(keys)}, WRITETIME(role) AS written FROM {keyspace}.{table}",
                                 fetch_size=page_size)  # fmt: skip
        page: list[Any] = []
        for row in session.execute(select, timeout=timeout):
            page.append(row)
            if len(page) >= page_size:
                updated += add_session_tokens(session, keyspace, table, page, concurrency=concurrency)
                page = []
        updated += add_session_tokens(session, keyspace, table, page, concurrency=concurrency)
    return updated


def add_session_tokens(
    session: Session, keyspace: str, table: str, rows: Sequence[Any], *, concurrency: int = 32
) -> int:
    """Add the session token to each of ``rows`` (its key columns and ``written``, its write time) of ``table``.

    ``rows`` may be stale (read a while ago): the token goes in at each row's write time, so a row deleted
    since then stays deleted. A row without a write time (no ``role`` cell: the indexer always writes one)
    is left alone. Returns the rows updated.
    """
    keys = KEYS[table]
    where = " AND ".join(f"{k} = ?" for k in keys)
    update = session.prepare(f"UPDATE {keyspace}.{table} USING TIMESTAMP ? SET tokens = tokens + ? WHERE {where}")
    values = [(r.written, {session_token(r.session_id)}, *(getattr(r, k) for k in keys))
              for r in rows if r.written is not None]  # fmt: skip
    if not values:
        return 0
    for ok, result in execute_concurrent_with_args(session, update, values, concurrency=concurrency,
                                                   raise_on_first_error=False):  # fmt: skip
        if not ok:
            raise result
    return len(values)
