"""Opening Cassandra for a command, with driver errors translated into ``ServiceError``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from cassandra.cluster import NoHostAvailable, Session

from projections.cassandra_session import connect
from schemas.settings import CassandraSettings
from streams.errors import ServiceError


@contextmanager
def cassandra_session(settings: CassandraSettings, keyspace: str | None = None) -> Iterator[Session]:
    """A connected session (bound to ``keyspace`` if given), shut down on exit."""
    try:
        cluster, session = connect(settings, keyspace)
    except NoHostAvailable as exc:
        raise ServiceError(f"cassandra at {settings.contact_points}:{settings.port} is not reachable") from exc
    try:
        yield session
    finally:
        cluster.shutdown()
