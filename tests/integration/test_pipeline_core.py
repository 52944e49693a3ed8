"""The pipeline end to end on the real Kafka: one worker process, the OpenAI-compatible test server.

Each test uses its own app name (per-app trigger settings) and sessions, so
they share one worker and one set of topics.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from schemas import DeleteSession, Summarize
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
from tests.support.openai_server import OpenAIServer, rate_limited, server_error

pytestmark = pytest.mark.integration

APPS = {
    "thr": {"event_threshold": 3},
    "time": {"time_threshold_s": 60},
    "br": {"event_threshold": 2},
    "force": {"event_threshold": 1000},
    "sync": {"event_threshold": 1000, "filter_key_allowlist": ["sync/search"]},
    "dlq": {"event_threshold": 1},
    "retry": {"event_threshold": 1},
    "del": {"event_threshold": 2},
}


RUNNING: list[WorkerProcess] = []
"""The module's worker, while it runs (for the state of a stalled one)."""


@pytest.fixture(scope="module")
def llm_server() -> Iterator[OpenAIServer]:
    with OpenAIServer() as server:
        yield server


@pytest.fixture(scope="module")
def pipeline(
    service_settings: Settings, llm_server: OpenAIServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Settings]:
    settings = scripted_pipeline_settings(
        service_settings, llm_server.base_url, partitions=2, kafka={"max_record_bytes": 200_000},
        apps=APPS, job_timeout_s=60,
    )  # fmt: skip
    asyncio.run(create_topics(settings))
    with workers(settings, tmp_path_factory.mktemp("pipeline")) as procs:
        RUNNING[:] = procs
        yield settings
        RUNNING.clear()
        for p in procs:
            assert p.proc.poll() is None, p.log_text()[-4000:]


@pytest.fixture()
async def client(pipeline: Settings) -> AsyncIterator[DistillClient]:
    async with DistillClient(pipeline) as c:
        yield c


async def session_summaries(settings: Settings, session: str, count: int, timeout: float = 60) -> list[dict[str, Any]]:
    """The session's summaries once there are ``count`` (fewer after ``timeout``: the worker's state is printed)."""

    def enough(records: list[Any]) -> bool:
        return len([s for s in summaries_of(records) if s["session_id"] == session]) >= count

    records = await read_topic(settings, settings.topics.summaries, until=enough, timeout=timeout)
    if not enough(records) and RUNNING:
        # Printed, not raised: the test's own assertion says what is missing; this says where the worker waits.
        print(f"{session}: fewer than {count} summaries after {timeout:g} s\n{RUNNING[0].diagnosis()}")
    return [s for s in summaries_of(records) if s["session_id"] == session]


async def test_event_threshold_fires_at_the_right_events(pipeline: Settings, client: DistillClient) -> None:
    b = SessionBuilder(app="thr")
    events = [b.user("Plan a trip to Lisbon in May; budget 2000 EUR."), b.assistant("Flights are 300 EUR."),
              b.user("Book the hotel near Alfama."), b.assistant("Booked Alfama Inn, 5 nights, 600 EUR.")]  # fmt: skip
    await client.publish_many(events)
    await session_summaries(pipeline, b.session, 1)
    # a key with a job in flight does not trigger again: the next batch follows the first summary
    more = [b.user("Add a dinner on Friday."), b.assistant("Reserved Taberna at 8pm."),
            b.user("And a museum ticket?"), b.assistant("Bought Gulbenkian tickets.")]  # fmt: skip
    await client.publish_many(more)
    events += more
    found = await session_summaries(pipeline, b.session, 2)
    assert [s["version"] for s in found] == [1, 2]
    # more than 3 events → the 4th and the 8th event fire
    assert found[0]["boundary"]["last_event_id"] == events[3].event_id
    assert found[1]["boundary"]["last_event_id"] == events[7].event_id
    assert found[1]["previous_version"] == 1
    assert found[0]["report"]["trigger"]["name"] == "event_threshold"
    assert found[0]["model"] == "scripted-model"


async def test_time_threshold_uses_event_timestamps(pipeline: Settings, client: DistillClient) -> None:
    b = SessionBuilder(app="time")
    first = [b.user("Summarize the Q3 report."), b.assistant("Q3 revenue grew 12%.")]
    later = [b.user("Now compare with Q2.", gap_s=600), b.assistant("Q2 grew 8%, so Q3 was faster.")]
    await client.publish_many(first + later)
    found = await session_summaries(pipeline, b.session, 1)
    assert len(found) == 1
    assert found[0]["boundary"]["last_event_id"] == later[1].event_id
    assert found[0]["report"]["trigger"]["name"] == "time_threshold"


async def test_branch_trigger_cascades_to_the_full_session(pipeline: Settings, client: DistillClient) -> None:
    b = SessionBuilder(app="br")
    events = [b.user("Research flights to Tokyo.")]
    events += [b.assistant(f"Search result {i}: fare {500 + i} USD", filter_key="br/search") for i in range(3)]
    await client.publish_many(events)

    def both(records: list[Any]) -> bool:
        keys = {s["filter_key"] for s in summaries_of(records) if s["session_id"] == b.session}
        return {"br/search", ""} <= keys

    records = await read_topic(pipeline, pipeline.topics.summaries, until=both, timeout=60)
    mine = [s for s in summaries_of(records) if s["session_id"] == b.session]
    assert {s["filter_key"] for s in mine} == {"br/search", ""}
    for key in ("br/search", ""):
        versions = [s["version"] for s in mine if s["filter_key"] == key]
        assert versions == list(range(1, len(versions) + 1))


async def test_force_and_sync_commands(pipeline: Settings, client: DistillClient) -> None:
    b = SessionBuilder(app="force")
    await client.publish_many([b.user("Draft an email to Ana about the launch."), b.assistant("Draft: Hi Ana, ...")])
    await client.publish(
        Summarize(app_name=b.app_name, user_id=b.user_id, session_id=b.session, command_id="c1", force=True)
    )
    found = await session_summaries(pipeline, b.session, 1)
    assert found[0]["version"] == 1 and found[0]["report"]["trigger"]["name"] == "force"

    await client.publish_many([b.user("Make it shorter."), b.assistant("Hi Ana, launch is Monday.")])
    key = SessionKeyOf(b)
    # Unforced (the same-run path, the default): the threshold is not met, nothing new is summarized;
    # the answer is the newest summary there is (Go's caller reads it after CreateSessionSummary).
    newest = await client.request_summary(key, wait=True, timeout=60)
    assert newest is not None and newest.version == 1 and newest.boundary.last_event_id == f"{b.session}-e2"
    summary = await client.request_summary(key, wait=True, timeout=60, force=True)
    assert summary is not None and summary.version == 2 and summary.reply_to is not None
    assert summary.boundary.last_event_id == f"{b.session}-e4"
    # Forced but nothing new: the summary covering the events, not a second one and not an error.
    again = await client.request_summary(key, wait=True, timeout=60, force=True)
    assert again is not None and again.version == 2 and again.summary == summary.summary


async def test_sync_request_for_a_branch_key_returns_that_keys_summary(
    pipeline: Settings, client: DistillClient
) -> None:
    b = SessionBuilder(app="sync")
    await client.publish_many(
        [
            b.user("Find flights to Oslo."),
            b.assistant("SAS at 09:10, 180 EUR.", filter_key="sync/search"),
            b.assistant("Norwegian at 14:00, 120 EUR.", filter_key="sync/search"),
            b.assistant("Hotel list saved.", filter_key="sync/other"),
        ]
    )
    key = SessionKeyOf(b)
    summary = await client.request_summary(key, "sync/search", wait=True, timeout=60, force=True)
    assert summary is not None and summary.filter_key == "sync/search" and summary.version == 1
    assert summary.boundary.last_event_id == f"{b.session}-e3"  # the branch's last event, not the session's
    # A key the allowlist refuses summarizes nothing (not the full session instead).
    assert await client.request_summary(key, "sync/other", wait=True, timeout=60, force=True) is None
    # No cascade: the session's summaries hold only the branch key.
    records = await read_topic(pipeline, pipeline.topics.summaries, timeout=5)
    mine = [s for s in summaries_of(records) if s["session_id"] == b.session]
    assert [s["filter_key"] for s in mine] == ["sync/search"]


async def test_invalid_records_are_dead_lettered_and_processing_goes_on(
    pipeline: Settings, client: DistillClient
) -> None:
    b = SessionBuilder(app="dlq")
    key = f"dlq/{b.user_id}/{b.session}".encode()
    await client.publish_raw(key, b"{not json")
    bad_schema = b.user("hello").model_dump(mode="json")
    del bad_schema["event_id"]
    await client.publish_raw(key, json.dumps(bad_schema).encode())
    huge = b.assistant("x" * 250_000).model_dump_json().encode()
    await client.publish_raw(key, huge)
    # RFC 3339, but before year 1 once in UTC: its conversion raised OverflowError, and the worker stopped
    # on the record at every restart.
    year_one = b.user("早上好").model_dump(mode="json") | {"timestamp": "0001-01-01T00:30:00+01:00"}
    await client.publish_raw(key, json.dumps(year_one).encode())
    good = [b.user("What is 2+2?"), b.assistant("4.")]
    await client.publish_many(good)

    def four(records: list[Any]) -> bool:
        return len([r for r in records if r.key == key]) >= 4

    letters = [json.loads(r.value) for r in await read_topic(pipeline, pipeline.topics.dead_letters, until=four)
               if r.key == key]  # fmt: skip
    assert [d["error_class"] for d in letters] == ["RecordDecodeError", "ValidationError", "OversizedRecord",
                                                    "ValidationError"]  # fmt: skip
    assert "event_id" in letters[1]["reason"] and "timestamp" in letters[3]["reason"]
    assert all(d["source_topic"] == pipeline.topics.events and d["source_offset"] >= 0 for d in letters)
    assert base64.b64decode(letters[0]["value_b64"]) == b"{not json"
    found = await session_summaries(pipeline, b.session, 1)
    assert found[0]["boundary"]["last_event_id"] == good[1].event_id


async def test_transient_llm_failures_are_retried_not_dropped(
    pipeline: Settings, client: DistillClient, llm_server: OpenAIServer
) -> None:
    b = SessionBuilder(app="retry")
    before = len(llm_server.requests)
    llm_server.script(rate_limited(retry_after=0.2), server_error(503), server_error(500))
    await client.publish_many([b.user("Translate 'hello' to French."), b.assistant("Bonjour.")])
    found = await session_summaries(pipeline, b.session, 1)
    assert len(found) == 1 and found[0]["version"] == 1
    assert len(llm_server.requests) - before >= 4
    letters = await read_topic(pipeline, pipeline.topics.dead_letters, timeout=3)
    assert not [r for r in letters if b.session.encode() in (r.key or b"")]


async def test_delete_session_resets_state_and_versions_keep_growing(pipeline: Settings, client: DistillClient) -> None:
    b = SessionBuilder(app="del")
    await client.publish_many([b.user("My passport number is X123."), b.assistant("Noted."), b.user("ok")])
    await client.publish_many([b.assistant("Anything else?")])
    first = await session_summaries(pipeline, b.session, 1)
    await client.publish(DeleteSession(app_name="del", user_id=b.user_id, session_id=b.session, command_id="d1"))
    await client.publish_many([b.user("Plan a picnic."), b.assistant("Bring sandwiches."), b.user("and drinks"),
                               b.assistant("Lemonade it is.")])  # fmt: skip
    found = await session_summaries(pipeline, b.session, len(first) + 1)
    latest = found[-1]
    assert latest["version"] == first[-1]["version"] + 1
    assert latest["previous_boundary"] is None
    assert "X123" not in latest["summary"]


def SessionKeyOf(b: SessionBuilder) -> Any:
    from schemas import SessionKey

    return SessionKey(b.app_name, b.user_id, b.session)


def test_worker_logs_are_json_with_coordinates(pipeline: Settings, tmp_path_factory: pytest.TempPathFactory) -> None:
    base = Path(str(tmp_path_factory.getbasetemp()))
    logs = list(base.glob("pipeline*/worker-0.log"))
    assert logs
    lines = [json.loads(line) for line in logs[0].read_text().splitlines() if line.startswith("{")]
    emitted = [line for line in lines if line.get("msg") == "summary job emitted"]
    assert emitted and {"topic", "partition", "offset", "session_id", "job_id"} <= emitted[0].keys()
    assert not any("Lisbon" in json.dumps(line) for line in lines if line["level"] == "info")


async def test_replay_twice_same_boundaries_and_unchanged_summaries_reused(
    pipeline: Settings, client: DistillClient, llm_server: OpenAIServer
) -> None:
    import re
    import subprocess

    from tests.integration.pipeline_support import DISTILL, replay_log_tail, worker_env

    b = SessionBuilder(app="thr")
    events = [b.user("Compare Postgres and Cassandra for time series."), b.assistant("Cassandra scales writes."),
              b.user("And for joins?"), b.assistant("Postgres handles joins; Cassandra does not.")]  # fmt: skip
    await client.publish_many(events)
    await session_summaries(pipeline, b.session, 1)

    def replay() -> list[tuple[int, str | None]]:
        # The command's own limits end it before the test's, so a stuck run prints where it stood.
        done = subprocess.run([DISTILL, "replay", "--session", b.session, "--idle-exit", "2", "--timeout", "100",
                               "--adopt-timeout", "40"], env=worker_env(pipeline), capture_output=True, text=True,
                              timeout=180)  # fmt: skip
        assert done.returncode == 0, (
            f"replay exited {done.returncode}:\n{done.stdout[:400]}\n{done.stdout[-600:]}\n{done.stderr[-3000:]}"
            + replay_log_tail(done.stdout)
        )
        topic = re.search(r"→ (\S+)", done.stdout.splitlines()[-1])
        assert topic is not None, done.stdout
        assert "LLM calls 0" in done.stdout, done.stdout
        records = asyncio.run(read_topic(pipeline, topic.group(1), timeout=10))
        return [(s["version"], s["boundary"]["last_event_id"]) for s in summaries_of(records)]

    calls = len(llm_server.requests)
    first = await asyncio.to_thread(replay)
    second = await asyncio.to_thread(replay)
    assert first == second == [(1, events[3].event_id)]
    assert len(llm_server.requests) == calls
