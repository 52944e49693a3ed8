"""A single-node Apache Kafka (KRaft, combined broker + controller) on loopback."""

from __future__ import annotations

import asyncio
import base64
import uuid
from pathlib import Path

from schemas.settings import ServicesSettings
from streams.services.process import quiet_loggers

KAFKA_VERSION = "3.9.2"
_JVM_FLAGS = [
    "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent", "-Djava.awt.headless=true",
]  # fmt: skip


def server_properties(settings: ServicesSettings, data_dir: Path, max_record_bytes: int) -> str:
    """The broker configuration: loopback listeners, one replica, fast group joins."""
    port, controller = settings.kafka_port, settings.kafka_controller_port
    lines = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(data_dir / "logs-data"),
        "num.partitions": "1",
        "auto.create.topics.enable": "true",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
        "message.max.bytes": str(max_record_bytes + 65536),
        "replica.fetch.max.bytes": str(max_record_bytes + 65536),
        "log.retention.hours": "-1",
    }
    return "".join(f"{k}={v}\n" for k, v in lines.items())


LOG4J_PROPERTIES = """\
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka=INFO
log4j.logger.org.apache.kafka=INFO
log4j.logger.state.change.logger=WARN
log4j.logger.kafka.request.logger=WARN
"""


def new_cluster_id() -> str:
    """A Kafka cluster id (the 22-character url-safe base64 form of a UUID).

    Never starting with ``-``: the storage tool would read such an id as an option
    (``-t -abc…`` → "expected one argument"), as Kafka's own ids avoid too.
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


def jvm_command(java: str, jars: Path, data_dir: Path, heap_mb: int, main: list[str]) -> list[str]:
    """``java`` with our flags, the classpath and ``main`` (class and arguments)."""
    return [
        java, f"-Xms{heap_mb}m", f"-Xmx{heap_mb}m", *_JVM_FLAGS,
        f"-Dkafka.logs.dir={data_dir / 'logs'}",
        f"-Dlog4j.configuration=file:{data_dir / 'log4j.properties'}",
        "-cp", f"{jars}/*", *main,
    ]  # fmt: skip


async def _metadata(bootstrap: str, timeout_s: float) -> int:
    from aiokafka import AIOKafkaClient

    client = AIOKafkaClient(bootstrap_servers=bootstrap, request_timeout_ms=int(timeout_s * 1000))
    try:
        await asyncio.wait_for(client.bootstrap(), timeout_s)
        return len(client.cluster.brokers())
    finally:
        await client.close()


def answers_metadata(bootstrap: str, timeout_s: float = 5.0) -> bool:
    """True if a Kafka broker at ``bootstrap`` answers a metadata request."""
    with quiet_loggers("aiokafka"):
        try:
            return asyncio.run(_metadata(bootstrap, timeout_s)) > 0
        except Exception:  # any failure means "not ready yet"
            return False
