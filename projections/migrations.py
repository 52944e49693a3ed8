"""Versioned CQL migrations: ``projections/cql/NNN_name.cql``, applied in order, once.

Each file holds statements separated by ``;`` lines. The applied versions are
recorded in ``<keyspace>.schema_migrations``; every statement must be
idempotent (``IF NOT EXISTS``) so a migration interrupted half-way can be
re-run safely.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from cassandra.cluster import Session

from projections.errors import MigrationMismatch
from projections.recall_backfill import backfill_session_tokens
from schemas.settings import CassandraSettings

SESSION_TOKENS_VERSION = 8
"""``008_recall_session_tokens``: applying it adds the session token to the recall rows already indexed."""

_NAME = re.compile(r"^(\d{3})_([a-z0-9_]+)\.cql$")


@dataclass(frozen=True)
class Migration:
    """One CQL file: its version, name, statements and checksum."""

    version: int
    name: str
    statements: tuple[str, ...]
    checksum: str


def load_migrations(keyspace: str) -> list[Migration]:
    """Every migration shipped with the package, in version order, for ``keyspace``."""
    out = []
    for entry in importlib.resources.files("projections").joinpath("cql").iterdir():
        match = _NAME.match(entry.name)
        if match is None:
            continue
        text = entry.read_text(encoding="utf-8").replace("{keyspace}", keyspace)
        statements = tuple(s.strip() for s in _split(text) if s.strip())
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        out.append(Migration(int(match.group(1)), match.group(2), statements, digest))
    return sorted(out, key=lambda m: m.version)


def _split(text: str) -> list[str]:
    lines = [ln for ln in text.splitlines() if not ln.strip().startswith("--")]
    return "\n".join(lines).split(";")


def _replication_cql(replication: dict[str, object]) -> str:
    items = ", ".join(f"'{k}': {v!r}" if isinstance(v, str) else f"'{k}': {v}" for k, v in replication.items())
    return "{" + items.replace('"', "'") + "}"


def apply_migrations(session: Session, settings: CassandraSettings) -> list[Migration]:
    """Create the keyspace and apply every migration not yet recorded. Returns those applied.

    Applying 008 also adds the session token to the recall rows already indexed (see
    ``projections.recall_backfill``); it is recorded only after that, so an interrupted run is re-run.
    """
    ks = settings.keyspace
    ddl = settings.schema_timeout_s
    session.execute(
        f"CREATE KEYSPACE IF NOT EXISTS {ks} WITH replication = {_replication_cql(settings.replication)}", timeout=ddl
    )
    session.execute(
        f"CREATE TABLE IF NOT EXISTS {ks}.schema_migrations ("
        "version int PRIMARY KEY, name text, checksum text, applied_at timestamp)",
        timeout=ddl,
    )
    done = {
        row.version: row.checksum for row in session.execute(f"SELECT version, checksum FROM {ks}.schema_migrations")
    }
    applied = []
    for migration in load_migrations(ks):
        if migration.version in done:
            if done[migration.version] != migration.checksum:
                raise MigrationMismatch(
                    f"migration {migration.version:03d}_{migration.name} changed after it was applied to keyspace "
                    f"{ks}; add a new migration instead of editing an applied one (or drop the keyspace)"
                )
            continue
        for statement in migration.statements:
            session.execute(statement, timeout=ddl)
        if migration.version == SESSION_TOKENS_VERSION:
            backfill_session_tokens(session, ks, timeout=ddl)
        session.execute(
            f"INSERT INTO {ks}.schema_migrations (version, name, checksum, applied_at) VALUES (%s, %s, %s, %s)",
            (migration.version, migration.name, migration.checksum, datetime.now(UTC)),
        )
        applied.append(migration)
    return applied
