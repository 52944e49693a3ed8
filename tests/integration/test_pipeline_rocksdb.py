"""The production table store: ``worker.store = "rocksdb://"`` (rocksdict) on the real Kafka.

A worker folds part of each session into its table and stops (SIGTERM), a
second one takes over the same data directory and completes the threshold, is
SIGKILLed after more events, and a third completes the next threshold (a
summary fires on the event that makes the count exceed 3). If the table state
were lost at any restart, the thresholds would fire late or not at all, and the
boundaries and versions would say so. The memory store (recovery from the
changelog alone) runs the same scenario.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from schemas.settings import Settings
from streams.app.factory import TABLE_NAME
from streams.client import DistillClient
from streams.clients.kafka_config import common_kwargs
from tests.integration.pipeline_support import (
    SessionBuilder,
    WorkerProcess,
    create_topics,
    read_topic,
    scripted_pipeline_settings,
    summaries_of,
)
from tests.integration.test_pipeline_guarantees import wait_for_assignment
from tests.support.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

SESSIONS = 6


async def wait_committed(settings: Settings, topic: str, timeout: float = 60.0) -> None:
    """Until the worker's group has committed the end offset of every partition of ``topic``."""
    admin = AIOKafkaAdminClient(**common_kwargs(settings.kafka))
    await admin.start()
    try:
        probe = AIOKafkaConsumer(**common_kwargs(settings.kafka))
        await probe.start()
        try:
            tps = [TopicPartition(topic, p) for p in range(settings.topics.partitions)]
            ends = await probe.end_offsets(tps)
        finally:
            await probe.stop()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            offsets = await admin.list_consumer_group_offsets(settings.worker.app_id)
            if all(ends[tp] == 0 or (tp in offsets and offsets[tp].offset >= ends[tp]) for tp in tps):
                return
            await asyncio.sleep(0.5)
        raise AssertionError(f"group {settings.worker.app_id} did not commit {ends} in {timeout}s")
    finally:
        await admin.close()


def table_files(data_dir: Path) -> list[Path]:
    return [p for p in data_dir.rglob("CURRENT") if TABLE_NAME in str(p)]


@pytest.mark.parametrize("store", ["memory://", "rocksdb://"])
async def test_table_survives_stop_and_sigkill(service_settings: Settings, tmp_path: Path, store: str) -> None:
    with OpenAIServer() as llm:
        settings = scripted_pipeline_settings(
            service_settings, llm.base_url, partitions=2, worker={"store": store, "data_dir": str(tmp_path / "faust")},
            event_threshold=3, job_timeout_s=30,
        )  # fmt: skip
        await create_topics(settings)
        builders = [SessionBuilder(app="rocks") for _ in range(SESSIONS)]
        events = settings.topics.events

        async def publish(round_: int, count: int) -> None:
            """``count`` events per session, user and assistant taking turns (as a session does)."""
            async with DistillClient(settings) as client:
                batch = [
                    b.user(f"round {round_}: request of {b.session}") if b.n % 2 == 0 else b.assistant("answer")
                    for b in builders
                    for _ in range(count)
                ]
                await client.publish_many(batch)

        # 1. Two events per session (a summary fires on the fourth: more than 3), then a clean stop.
        first = WorkerProcess(settings, tmp_path / "worker-1.log")
        try:
            await wait_for_assignment(first)
            await publish(1, 2)
            await wait_committed(settings, events)
        finally:
            first.stop()
        if store.startswith("rocksdb"):
            assert table_files(tmp_path / "faust"), "no RocksDB table under the worker's data dir"

        # 2. The fourth event fires on the restored state; three more, then SIGKILL.
        second = WorkerProcess(settings, tmp_path / "worker-2.log")
        try:
            await wait_for_assignment(second)
            await publish(2, 2)
            await read_topic(settings, settings.topics.summaries, min_records=SESSIONS, timeout=90)
            await publish(3, 3)
            await wait_committed(settings, events)
        finally:
            second.kill()
            second.stop()

        # 3. The eighth event fires after the crash.
        third = WorkerProcess(settings, tmp_path / "worker-3.log")
        try:
            await wait_for_assignment(third)
            await publish(4, 1)
            records = await read_topic(settings, settings.topics.summaries, min_records=2 * SESSIONS, timeout=90)
            assert third.proc.poll() is None, third.log_text()[-3000:]
        finally:
            third.stop()

    assert summaries_of(records), [r.value[:300] for r in records[:3]]
    chains: dict[str, list[tuple[int, str]]] = {}
    for s in summaries_of(records):
        if s["filter_key"] == "":
            chains.setdefault(s["session_id"], []).append((s["version"], s["boundary"]["last_event_id"]))
    expected = {b.session: [(1, f"{b.session}-e4"), (2, f"{b.session}-e8")] for b in builders}
    assert chains == expected
