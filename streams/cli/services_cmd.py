"""``distill services up|down|status``: local Kafka and Cassandra without Docker."""

from __future__ import annotations

import click


@click.group("services")
def command() -> None:
    """Start, stop and inspect the local Kafka and Cassandra JVM processes."""
