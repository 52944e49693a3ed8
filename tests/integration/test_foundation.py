"""The real Kafka and Cassandra through the real clients, and ``distill init``."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from projections.cassandra_session import aexecute, connect
from projections.migrations import load_migrations
from schemas.settings import Settings
from streams.clients.kafka_config import consumer_kwargs, producer_kwargs
from streams.clients.topics_admin import ensure_topics
from tests.support.cleanup import register_prefix

pytestmark = pytest.mark.integration


async def test_kafka_roundtrip_with_consumer_group(isolated_settings: Settings) -> None:
    settings = isolated_settings
    await ensure_topics(settings)
    topic = settings.topics.events
    producer = AIOKafkaProducer(**producer_kwargs(settings.kafka))
    await producer.start()
    try:
        for i in range(20):
            await producer.send_and_wait(topic, f"value-{i}".encode(), key=f"session-{i % 3}".encode())
        big = b"x" * (2 * 1024 * 1024)  # tool results can be large: above Kafka's 1 MiB default
        await producer.send_and_wait(topic, big, key=b"session-big")
    finally:
        await producer.stop()

    group = register_prefix(f"g-{uuid.uuid4().hex[:6]}")
    consumer = AIOKafkaConsumer(
        topic, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
        **consumer_kwargs(settings.kafka),
    )  # fmt: skip
    await consumer.start()
    seen: list[bytes] = []
    try:
        while len(seen) < 21:
            batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), timeout=30)
            for records in batch.values():
                seen.extend(r.value for r in records if r.value is not None)
        assert consumer.assignment(), "the consumer group join assigned no partition"
        await consumer.commit()
        committed = [await consumer.committed(tp) for tp in consumer.assignment()]
    finally:
        await consumer.stop()
    assert sorted(v for v in seen if len(v) < 100) == sorted(f"value-{i}".encode() for i in range(20))
    assert big in seen
    assert sum(c or 0 for c in committed) == 21


async def test_cassandra_write_and_read(pooled_settings: Settings) -> None:
    cluster, session = connect(pooled_settings.cassandra)
    try:
        ks = pooled_settings.cassandra.keyspace
        insert = session.prepare(
            f"INSERT INTO {ks}.projector_offsets (consumer_group, topic, partition, next_offset) VALUES (?, ?, ?, ?)"
        )
        await aexecute(session, insert, ("g", "t", 0, 42))
        await aexecute(session, insert, ("g", "t", 0, 43))
        rows = list(await aexecute(session, f"SELECT next_offset FROM {ks}.projector_offsets WHERE consumer_group='g'"))
        assert [r.next_offset for r in rows] == [43]
        with pytest.raises(Exception, match="no_such_table does not exist"):
            await aexecute(session, f"SELECT * FROM {ks}.no_such_table")
    finally:
        cluster.shutdown()


def _distill(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "DISTILL_KAFKA__BOOTSTRAP_SERVERS": settings.kafka.bootstrap_servers,
        "DISTILL_CASSANDRA__CONTACT_POINTS": settings.cassandra.contact_points,
        "DISTILL_CASSANDRA__PORT": str(settings.cassandra.port),
        "DISTILL_CASSANDRA__KEYSPACE": settings.cassandra.keyspace,
        "DISTILL_TOPICS__EVENTS": settings.topics.events,
        "DISTILL_TOPICS__JOBS": settings.topics.jobs,
        "DISTILL_TOPICS__SUMMARIES": settings.topics.summaries,
        "DISTILL_TOPICS__DEAD_LETTERS": settings.topics.dead_letters,
        "DISTILL_TOPICS__PARTITIONS": str(settings.topics.partitions),
    }
    cmd = [sys.executable, "-c", "from streams.cli.main import main; main()", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=False)


def test_init_twice_is_idempotent(isolated_settings: Settings) -> None:
    first = _distill(isolated_settings, "init")
    assert first.returncode == 0, first.stderr
    assert first.stdout.count(": created") == 4
    assert f"migrations applied: 001_{load_migrations('x')[0].name}" in first.stdout
    second = _distill(isolated_settings, "init")
    assert second.returncode == 0, second.stderr
    assert second.stdout.count(": exists") == 4
    assert "none (up to date)" in second.stdout
    cluster, session = connect(isolated_settings.cassandra)
    try:
        ks = isolated_settings.cassandra.keyspace
        versions = [r.version for r in session.execute(f"SELECT version FROM {ks}.schema_migrations")]
        assert sorted(versions) == [m.version for m in load_migrations(ks)]
        session.execute(f"DROP KEYSPACE IF EXISTS {ks}", timeout=120)
    finally:
        cluster.shutdown()


def test_init_rejects_mismatched_partition_counts(isolated_settings: Settings) -> None:
    assert _distill(isolated_settings, "init", "--skip-cassandra").returncode == 0
    data = isolated_settings.model_dump()
    data["topics"]["partitions"] = 3
    result = _distill(Settings(**data), "init", "--skip-cassandra")
    assert result.returncode == 1
    assert "has 2 partitions but distill expects 3" in result.stderr
    assert "Traceback" not in result.stderr


def test_changed_applied_migration_is_a_clear_error(pooled_settings: Settings) -> None:
    # A pooled keyspace is migrated already (creating one is what test_init_twice_is_idempotent
    # checks); its checksum is put back for the next test that leases it.
    cluster, session = connect(pooled_settings.cassandra)
    ks = pooled_settings.cassandra.keyspace
    original = session.execute(f"SELECT checksum FROM {ks}.schema_migrations WHERE version = 1").one().checksum
    try:
        assert _distill(pooled_settings, "init", "--skip-kafka").returncode == 0
        session.execute(f"UPDATE {ks}.schema_migrations SET checksum = 'edited' WHERE version = 1")
        result = _distill(pooled_settings, "init", "--skip-kafka")
        assert result.returncode == 1
        assert result.stderr.startswith(f"error: migration 001_base changed after it was applied to keyspace {ks}")
    finally:
        session.execute(f"UPDATE {ks}.schema_migrations SET checksum = %s WHERE version = 1", (original,))
        cluster.shutdown()
