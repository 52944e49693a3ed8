"""The projector process against real Kafka and Cassandra: SIGKILL mid-batch, dead letters, retry while paused."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from projections.cassandra_session import connect
from projections.errors import StoreUnavailable
from projections.kafka_runner import ProjectorRunner
from projections.projector import BatchOutcome, Projector
from schemas import SessionKey
from schemas.settings import Settings
from streams.clients.kafka_config import consumer_kwargs, producer_kwargs
from streams.clients.topics_admin import ensure_topics
from streams.errors import ServiceError
from tests.integration.test_projections_support import event, summary

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="session")]


async def _produce(settings: Settings, values: list[tuple[str, bytes, bytes]]) -> None:
    producer = AIOKafkaProducer(**producer_kwargs(settings.kafka))
    await producer.start()
    try:
        futures = [await producer.send(topic, value, key=k) for topic, k, value in values]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def _ensure_topics(settings: Settings) -> None:
    # Right after creation the broker may describe a topic with 0 partitions; ask again.
    for attempt in range(20):
        try:
            await ensure_topics(settings)
            return
        except ServiceError:
            if attempt == 19:
                raise
            await asyncio.sleep(0.25)


def _env(settings: Settings) -> dict[str, str]:
    env = dict(os.environ)
    env["DISTILL_CASSANDRA__KEYSPACE"] = settings.cassandra.keyspace
    for name in ("events", "jobs", "summaries", "dead_letters"):
        env[f"DISTILL_TOPICS__{name.upper()}"] = getattr(settings.topics, name)
    env["DISTILL_TOPICS__PARTITIONS"] = str(settings.topics.partitions)
    env["DISTILL_WORKER__LOG_LEVEL"] = "WARNING"
    return env


def _start(settings: Settings, group: str) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-c", "from streams.cli.main import main; main()", "projector", "--group", group,
           "--max-batch", "150"]  # fmt: skip
    return subprocess.Popen(cmd, env=_env(settings), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


async def _dead_letters(settings: Settings, expect: int, timeout: float = 30) -> list[dict[str, Any]]:
    consumer = AIOKafkaConsumer(settings.topics.dead_letters, **consumer_kwargs(settings.kafka),
                                auto_offset_reset="earliest", enable_auto_commit=False)  # fmt: skip
    await consumer.start()
    out: list[dict[str, Any]] = []
    try:
        deadline = time.monotonic() + timeout
        while len(out) < expect and time.monotonic() < deadline:
            for batch in (await consumer.getmany(timeout_ms=500)).values():
                out += [json.loads(r.value) for r in batch]
    finally:
        await consumer.stop()
    return out


async def test_sigkill_mid_batch_resumes_without_loss_or_duplicates(pooled_settings: Settings) -> None:
    settings = pooled_settings
    await _ensure_topics(settings)
    cluster, session = connect(settings.cassandra)
    ks = settings.cassandra.keyspace
    try:
        sessions = [SessionKey("app", f"u{i % 3}", f"s{i}") for i in range(12)]
        values: list[tuple[str, bytes, bytes]] = []
        expected: set[tuple[str, str, str]] = set()
        for n in range(300):
            for k in sessions:
                ev = event(k, f"e{n}", at=n, role="user" if n % 2 else "assistant", content=f"message {n} " * 20)
                values.append((settings.topics.events, k.kafka_key(), json.dumps(ev).encode()))
                expected.add((k.user_id, k.session_id, f"e{n}"))
        values.insert(1000, (settings.topics.events, b"bad", b"{not json"))
        for k in sessions:
            s = summary(k, 1, text=f"summary of {k.session_id}", cutoff=100, last_event_id="e100")
            values.append((settings.topics.summaries, k.kafka_key(), json.dumps(s).encode()))
        await _produce(settings, values)

        def count() -> int:
            return int(session.execute(f"SELECT count(*) FROM {ks}.event_ids").one()[0])

        proc = _start(settings, "g-kill")
        deadline = time.monotonic() + 60
        while count() < 600 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        killed_at = count()
        assert 0 < killed_at < len(expected), "the kill must land mid-stream"

        proc = _start(settings, "g-kill")
        deadline = time.monotonic() + 120
        while count() < len(expected) and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        await asyncio.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, proc.stderr.read().decode() if proc.stderr else ""

        stored = {(r.user_id, r.session_id, r.event_id) for r in session.execute(
            f"SELECT user_id, session_id, event_id FROM {ks}.events_by_session")}  # fmt: skip
        assert stored == expected
        assert count() == len(expected)  # no duplicates in the lookup table either
        summaries = list(session.execute(f"SELECT session_id, version FROM {ks}.summaries_latest"))
        assert len(summaries) == len(sessions) and {r.version for r in summaries} == {1}
        offsets = {
            (r.topic, r.partition): r.next_offset
            for r in session.execute(
                f"SELECT topic, partition, next_offset FROM {ks}.projector_offsets WHERE consumer_group = 'g-kill'"
            )
        }
        assert sum(v for (t, _), v in offsets.items() if t == settings.topics.events) == len(values) - len(sessions)
        letters = await _dead_letters(settings, 1)
        assert letters and letters[0]["error_class"] == "RecordDecodeError"
        assert letters[0]["source_topic"] == settings.topics.events
    finally:
        cluster.shutdown()


class _FlakyProjector(Projector):
    """Fails the first ``failures`` batches as if Cassandra were down."""

    failures = 2
    attempts = 0

    async def project(self, *args: Any, **kwargs: Any) -> BatchOutcome:
        self.attempts += 1
        if self.attempts <= self.failures:
            raise StoreUnavailable("simulated outage")
        return await super().project(*args, **kwargs)


async def test_store_outage_pauses_and_retries_without_loss(
    pooled_settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    settings = pooled_settings
    await _ensure_topics(settings)
    cluster, session = connect(settings.cassandra)
    ks = settings.cassandra.keyspace
    try:
        k = SessionKey("app", "u", "s")
        await _produce(settings, [(settings.topics.events, k.kafka_key(), json.dumps(event(k, f"e{i}", at=i)).encode())
                                  for i in range(50)])  # fmt: skip
        projector = _FlakyProjector(session, ks, events_topic=settings.topics.events,
                                    summaries_topic=settings.topics.summaries, consumer_group="g-flaky")  # fmt: skip
        runner = ProjectorRunner(projector, dead_letter_topic=settings.topics.dead_letters,
                                 consumer_kwargs=consumer_kwargs(settings.kafka),
                                 producer_kwargs=producer_kwargs(settings.kafka), backoff_initial_s=0.1)  # fmt: skip
        task = asyncio.create_task(runner.run())
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if session.execute(f"SELECT count(*) FROM {ks}.event_ids").one()[0] == 50:
                break
            await asyncio.sleep(0.2)
        runner.stop()
        await asyncio.wait_for(task, 30)
        assert session.execute(f"SELECT count(*) FROM {ks}.event_ids").one()[0] == 50
        assert projector.attempts >= 3
        assert any("cassandra unavailable, consumer paused" in r.getMessage() for r in caplog.records)
    finally:
        cluster.shutdown()
