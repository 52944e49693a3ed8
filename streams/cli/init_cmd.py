"""``distill init``: create topics and apply the Cassandra migrations (idempotent)."""

from __future__ import annotations

import click


@click.command("init")
def command() -> None:
    """Create the Kafka topics and the Cassandra keyspace and tables."""
    raise click.ClickException("not yet implemented")
