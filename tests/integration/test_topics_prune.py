"""``distill topics prune`` against the broker: a run's topics and consumer groups go, others stay."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from schemas.settings import Settings
from streams.clients.kafka_config import common_kwargs, consumer_kwargs, producer_kwargs
from streams.clients.topics_prune import delete_prefixed
from tests.integration.pipeline_support import worker_env
from tests.support.cleanup import sweep

pytestmark = pytest.mark.integration


async def _names(settings: Settings) -> tuple[set[str], set[str]]:
    admin = AIOKafkaAdminClient(**common_kwargs(settings.kafka))
    await admin.start()
    try:
        return set(await admin.list_topics()), {g[0] for g in await admin.list_consumer_groups()}
    finally:
        await admin.close()


async def _make(settings: Settings, prefix: str) -> tuple[str, str]:
    topic, group = f"{prefix}events", f"{prefix}group"
    admin = AIOKafkaAdminClient(**common_kwargs(settings.kafka))
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(**producer_kwargs(settings.kafka))
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"x")
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(topic, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
                                **consumer_kwargs(settings.kafka))  # fmt: skip
    await consumer.start()
    try:
        await consumer.getmany(timeout_ms=5000)
        await consumer.commit()
    finally:
        await consumer.stop()
    return topic, group


async def test_prune_deletes_the_prefixed_topics_and_groups_only(isolated_settings: Settings) -> None:
    run, other = f"prune-{uuid.uuid4().hex[:8]}.", f"keep-{uuid.uuid4().hex[:8]}."
    topic, group = await _make(isolated_settings, run)
    kept_topic, kept_group = await _make(isolated_settings, other)
    try:
        dry = await delete_prefixed(isolated_settings.kafka, [run], dry_run=True)
        assert (dry.topics, dry.groups) == ([topic], [group])
        topics, groups = await _names(isolated_settings)
        assert topic in topics and group in groups  # a dry run deletes nothing

        done = await delete_prefixed(isolated_settings.kafka, [run])
        assert (done.topics, done.groups, done.failed) == ([topic], [group], {})
        topics, groups = await _names(isolated_settings)
        assert topic not in topics and group not in groups
        assert kept_topic in topics and kept_group in groups
    finally:
        await delete_prefixed(isolated_settings.kafka, [run, other])


def test_cli_refuses_a_prefix_of_the_live_topics(isolated_settings: Settings) -> None:
    env = worker_env(isolated_settings)
    cmd = [sys.executable, "-c", "from streams.cli.main import main; main()", "topics", "prune", "--prefix", "t-"]
    found = subprocess.run([*cmd, "--dry-run"],
                           env=env, capture_output=True, text=True, check=False)  # fmt: skip
    assert found.returncode != 0
    assert "refusing" in found.stderr


async def test_what_a_killed_test_run_registered_is_deleted_by_the_next_run(
    isolated_settings: Settings, tmp_path: Path
) -> None:
    """A test process killed before its end leaves its ledger; the next session's sweep deletes what it names."""
    killed, alive = f"ledger-{uuid.uuid4().hex[:8]}.", f"ledger-{uuid.uuid4().hex[:8]}."
    topic, group = await _make(isolated_settings, killed)
    kept_topic, _ = await _make(isolated_settings, alive)
    bootstrap = isolated_settings.kafka.bootstrap_servers
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # a pid that is gone, as a killed run's is
    (tmp_path / f"{proc.pid}.ledger").write_text(f"{bootstrap}\n{killed}\n")
    # A live process's ledger (this one's) names the other prefix: never swept.
    (tmp_path / f"{os.getpid()}.ledger").write_text(f"{bootstrap}\n{alive}\n")
    try:

        def real_delete(prefixes: list[str], label: str) -> bool:
            asyncio.run(delete_prefixed(isolated_settings.kafka, prefixes))  # its own loop: the sweep's thread
            return True

        removed = await asyncio.to_thread(sweep, tmp_path, bootstrap, real_delete)
        assert [r.prefixes for r in removed] == [(killed,)]
        topics, groups = await _names(isolated_settings)
        assert topic not in topics and group not in groups
        assert kept_topic in topics
        assert sorted(p.name for p in tmp_path.iterdir()) == [f"{os.getpid()}.ledger"]
    finally:
        await delete_prefixed(isolated_settings.kafka, [killed, alive])
