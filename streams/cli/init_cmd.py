"""``distill init``: create topics and apply the Cassandra migrations (idempotent)."""

from __future__ import annotations

import asyncio

import click

from projections.errors import MigrationMismatch
from projections.migrations import apply_migrations
from schemas.settings import load_settings
from streams.clients.cassandra_connection import cassandra_session
from streams.errors import ConfigurationError


@click.command("init")
@click.option("--skip-kafka", is_flag=True, help="Do not create topics.")
@click.option("--skip-cassandra", is_flag=True, help="Do not apply CQL migrations.")
def command(skip_kafka: bool, skip_cassandra: bool) -> None:
    """Create the Kafka topics and the Cassandra keyspace and tables. Safe to run on every start."""
    from streams.clients.topics_admin import ensure_topics

    settings = load_settings()
    if not skip_kafka:
        for topic, state in asyncio.run(ensure_topics(settings)).items():
            click.echo(f"topic {topic}: {state}")
    if not skip_cassandra:
        with cassandra_session(settings.cassandra) as session:
            try:
                applied = apply_migrations(session, settings.cassandra)
            except MigrationMismatch as exc:
                raise ConfigurationError(str(exc)) from exc
        names = ", ".join(f"{m.version:03d}_{m.name}" for m in applied) or "none (up to date)"
        click.echo(f"keyspace {settings.cassandra.keyspace}: migrations applied: {names}")
