"""Kafka and Cassandra from testcontainers, for developers who have a Docker engine."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from schemas.settings import Settings
from streams.services.cassandra import CASSANDRA_VERSION
from streams.services.kafka import KAFKA_VERSION


@contextmanager
def docker_services(settings: Settings) -> Iterator[Settings]:
    """Start the same versions as the local services in containers; yield settings for them."""
    from testcontainers.cassandra import CassandraContainer
    from testcontainers.kafka import KafkaContainer

    with (
        KafkaContainer(image=f"apache/kafka:{KAFKA_VERSION}").with_kraft() as kafka,
        CassandraContainer(f"cassandra:{CASSANDRA_VERSION}") as cassandra,
    ):
        host, port = cassandra.get_contact_points()[0]
        data = settings.model_dump()
        data["kafka"]["bootstrap_servers"] = kafka.get_bootstrap_server()
        data["cassandra"]["contact_points"] = host
        data["cassandra"]["port"] = port
        yield Settings(**data)
