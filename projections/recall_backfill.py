"""Backfill of migration 008: session tokens and context lines for the recall rows indexed before it.

From 008 on the indexer writes every ``recall_docs`` / ``recall_chunks`` row with its session's token
(``lexical.session_token``) and a ``recall_lines`` row per document, and the session scopes of
``session_search`` require the token (``tokens CONTAINS``): a row indexed before would no longer be found,
nor shown as a hit's neighbour. ``apply_migrations`` runs this once, right after 008, and records the
migration only when it is done (an interrupted run is simply run again: both writes are idempotent).

Each write goes in at its source row's own write time (``USING TIMESTAMP WRITETIME(role)``), never later:
a session deleted before or while this runs stays deleted (the deletion is the later write, and at a tie
Cassandra's tombstone wins), so the backfill can neither resurrect a row nor leave one behind with only
its token or line. A row the indexer writes again meanwhile carries both already.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cassandra.cluster import Session
from cassandra.concurrent import execute_concurrent
from cassandra.query import SimpleStatement

from projections import statements as q
from projections.lexical import context_line, session_token

KEYS = {
    "recall_docs": ("app_name", "user_id", "session_id", "ts", "event_id"),
    "recall_chunks": ("app_name", "user_id", "session_id", "ts", "event_id", "chunk"),
}
"""The primary key columns of each tokenized recall table, in order."""


def backfill_session_tokens(
    session: Session, keyspace: str, *, page_size: int = 500, concurrency: int = 32, timeout: float = 60.0
) -> int:
    """Add each recall row's session token to its ``tokens``, and each document's line; returns the rows read.

    Blocking. ``recall_docs`` is read with its text (the lines are made from it), ``recall_chunks`` without.
    """
    done = 0
    for table in KEYS:
        select = SimpleStatement(source_query(keyspace, table), fetch_size=page_size)
        page: list[Any] = []
        for row in session.execute(select, timeout=timeout):
            page.append(row)
            if len(page) >= page_size:
                done += add_session_tokens(session, keyspace, table, page, concurrency=concurrency)
                page = []
        done += add_session_tokens(session, keyspace, table, page, concurrency=concurrency)
    return done


def source_query(keyspace: str, table: str) -> str:
    """The ``SELECT`` of ``table``'s rows as ``add_session_tokens`` takes them (append a ``WHERE`` to narrow it)."""
    text = ", role, text" if table == "recall_docs" else ""
    return f"SELECT {', '.join(KEYS[table])}{text}, WRITETIME(role) AS written FROM {keyspace}.{table}"


def add_session_tokens(
    session: Session, keyspace: str, table: str, rows: Sequence[Any], *, concurrency: int = 32
) -> int:
    """Backfill ``rows`` of ``table``: their key columns and ``written`` (the write time), for ``recall_docs``
    with ``role`` and ``text`` too (the document's ``recall_lines`` row is written as well).

    ``rows`` may be stale (read a while ago): each write goes in at its row's write time, so a row deleted
    since then stays deleted. A row without a write time (no ``role`` cell: the indexer always writes one)
    is left alone. Returns the rows backfilled.
    """
    keys = KEYS[table]
    where = " AND ".join(f"{k} = ?" for k in keys)
    work: list[tuple[Any, tuple[Any, ...]]] = []
    update = session.prepare(f"UPDATE {keyspace}.{table} USING TIMESTAMP ? SET tokens = tokens + ? WHERE {where}")
    line = session.prepare(q.INSERT_RECALL_LINE.format(ks=keyspace) + " USING TIMESTAMP ?")
    live = [r for r in rows if r.written is not None]
    for r in live:
        work.append((update, (r.written, {session_token(r.session_id)}, *(getattr(r, k) for k in keys))))
        if table == "recall_docs":
            work.append((line, (r.app_name, r.user_id, r.session_id, r.ts, r.event_id, r.role,
                                context_line(r.text or ""), r.written)))  # fmt: skip
    for ok, result in execute_concurrent(session, work, concurrency=concurrency, raise_on_first_error=False):
        if not ok:
            raise result
    return len(live)
