"""``distill init``: create topics and apply the Cassandra migrations (idempotent)."""

from __future__ import annotations

import asyncio

import click

from projections.cassandra_session import connect
from projections.migrations import apply_migrations
from schemas.settings import load_settings
from streams.errors import ServiceError


@click.command("init")
@click.option("--skip-kafka", is_flag=True, help="Do not create topics.")
@click.option("--skip-cassandra", is_flag=True, help="Do not apply CQL migrations.")
def command(skip_kafka: bool, skip_cassandra: bool) -> None:
    """Create the Kafka topics and the Cassandra keyspace and tables. Safe to run on every start."""
    from streams.topics_admin import ensure_topics

    settings = load_settings()
    if not skip_kafka:
        for topic, state in asyncio.run(ensure_topics(settings)).items():
            click.echo(f"topic {topic}: {state}")
    if not skip_cassandra:
        from cassandra.cluster import NoHostAvailable

        try:
            cluster, session = connect(settings.cassandra)
        except NoHostAvailable as exc:
            raise ServiceError(
                f"cassandra at {settings.cassandra.contact_points}:{settings.cassandra.port} is not reachable"
            ) from exc
        try:
            applied = apply_migrations(session, settings.cassandra)
        finally:
            cluster.shutdown()
        names = ", ".join(f"{m.version:03d}_{m.name}" for m in applied) or "none (up to date)"
        click.echo(f"keyspace {settings.cassandra.keyspace}: migrations applied: {names}")
