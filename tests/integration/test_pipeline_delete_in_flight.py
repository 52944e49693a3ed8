"""A ``delete_session`` while one of the session's jobs is in flight: its content is not sent again.

One worker, ``async_summary_num=1``, the OpenAI-compatible test server recording every request.
A job waiting for the model slot when its session is deleted never sends its request; a job whose
call is in progress is dropped (its call fails late: a retry would send the deleted session again).
Neither publishes a summary of the deleted session.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import pytest
from aiokafka.partitioner import murmur2

from schemas import DeleteSession
from schemas.settings import Settings
from streams.client import DistillClient
from tests.integration.pipeline_support import (
    SessionBuilder,
    WorkerProcess,
    create_topics,
    read_topic,
    scripted_pipeline_settings,
    summaries_of,
    workers,
)
from tests.support.openai_server import OpenAIServer, Received, Reply, answer, echo_summary, request_text, server_error

pytestmark = pytest.mark.integration

PARTITIONS = 4
BLOCKER_S = 8.0
"""How long the call holding the only model slot lasts."""
FAILING_S = 5.0
"""How long the call in progress at the deletion takes before it fails (HTTP 500)."""


def model(body: dict[str, Any]) -> Reply:
    text = request_text(body)
    if "BLOCKER" in text:
        return answer("summary of the blocker", delay_s=BLOCKER_S)
    if "FAILSLOW" in text:
        return dataclasses.replace(server_error(500), delay_s=FAILING_S)
    return echo_summary(body)


async def wait_for(condition: Any, timeout: float, worker: WorkerProcess) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, worker.diagnosis()
        await asyncio.sleep(0.05)


def on_partitions(app: str, count: int) -> list[SessionBuilder]:
    """``count`` sessions of ``app``, each on its own events partition (the client's key, Kafka's partitioner)."""
    chosen: dict[int, SessionBuilder] = {}
    while len(chosen) < count:
        builder = SessionBuilder(app=app)
        key = f"{app}/{builder.user_id}/{builder.session}".encode()
        chosen.setdefault((murmur2(key) & 0x7FFFFFFF) % PARTITIONS, builder)
    return list(chosen.values())


def carrying(requests: list[Received], marker: str, since: float = 0.0) -> list[Received]:
    return [r for r in requests if marker in r.text() and r.at >= since]


@pytest.mark.parametrize("store", ["memory://", "rocksdb://"])
async def test_a_deletion_stops_the_sessions_jobs_in_flight_before_their_model_calls(
    isolated_settings: Settings, tmp_path: Path, store: str
) -> None:
    # RocksDB: the track agent's store reads only the partition of the event folded last, so the
    # cancellation must not depend on reading the table back (``WorkerRuntime.sessions_deleted``):
    # the three sessions are on three partitions.
    with OpenAIServer(default=model) as llm:
        settings = scripted_pipeline_settings(
            isolated_settings, llm.base_url, partitions=PARTITIONS, event_threshold=1, async_summary_num=1,
            job_timeout_s=120, job_max_attempts=5, worker={"store": store, "data_dir": str(tmp_path / "faust")},
        )  # fmt: skip
        await create_topics(settings)
        blocker, waiting, failing = on_partitions("del", 3)
        with workers(settings, tmp_path) as procs:
            async with DistillClient(settings) as client:
                # A job whose call fails late is in progress when its session is deleted.
                await client.publish_many(
                    [failing.user("FAILSLOW my card is 4111 DELF1"), failing.assistant("ok DELF2")]
                )
                await wait_for(lambda: carrying(llm.requests, "DELF1"), 90, procs[0])
                await client.publish(DeleteSession(app_name="del", user_id=failing.user_id,
                                                   session_id=failing.session, command_id="d-failing"))  # fmt: skip
                failing_deleted = time.monotonic()

                # Another session's slow call holds the only model slot; a job of ours waits for it.
                await client.publish_many([blocker.user("BLOCKER plan the trip"), blocker.assistant("planned")])
                await wait_for(lambda: carrying(llm.requests, "BLOCKER"), 30, procs[0])
                await client.publish_many(
                    [waiting.user("my address is 1 Main St DELW1"), waiting.assistant("ok DELW2")]
                )

                def job_emitted(records: list[Any]) -> bool:
                    return any(json.loads(r.value).get("session_id") == waiting.session for r in records)

                await read_topic(settings, settings.topics.jobs, until=job_emitted, timeout=20)
                await asyncio.sleep(0.5)  # the job reached the worker's pool: it waits for the slot
                assert not carrying(llm.requests, "DELW1")
                await client.publish(DeleteSession(app_name="del", user_id=waiting.user_id,
                                                   session_id=waiting.session, command_id="d-waiting"))  # fmt: skip
                waiting_deleted = time.monotonic()

            def blocker_summarized(records: list[Any]) -> bool:
                return any(s["session_id"] == blocker.session for s in summaries_of(records))

            records = await read_topic(settings, settings.topics.summaries, until=blocker_summarized, timeout=40)
            assert blocker_summarized(records), procs[0].diagnosis()
            # Where a retry of the failed call (backoff) or the waiting job's call would land.
            await asyncio.sleep(FAILING_S + 3)
            records = await read_topic(settings, settings.topics.summaries, timeout=5)
            assert procs[0].proc.poll() is None, procs[0].log_text()[-3000:]
        assert not carrying(llm.requests, "DELW1", since=waiting_deleted), "the waiting job sent the deleted session"
        assert not carrying(llm.requests, "DELW1")  # it was waiting: never sent at all
        assert not carrying(llm.requests, "DELF1", since=failing_deleted), "the deleted session was sent again"
        deleted = {waiting.session, failing.session}
        assert not [s for s in summaries_of(records) if s["session_id"] in deleted]
