"""``request_summary`` while the key's job is in flight, and the same-run (intra-run) path.

Real Kafka, one worker process, a scripted model that answers slowly (so the
job a tool result triggers is still running when the agent asks) and echoes
every marker of its request. Every event carries a marker, so a summary holds
the marker of every event it covers (the oracle). The app fires on every event
that may trigger (``event_threshold = 0``): each tool result starts a job.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from schemas import SessionEvent, SessionKey
from schemas.settings import Settings
from streams.client import DistillClient, SummaryUnavailableError
from tests.integration.pipeline_support import (
    SessionBuilder,
    create_topics,
    read_topic,
    scripted_pipeline_settings,
    summaries_of,
    workers,
)
from tests.support.openai_server import OpenAIServer, Reply, answer, bad_request, request_text

pytestmark = pytest.mark.integration

APP = "sync"
MARKER = re.compile(r"MS-[0-9a-f]{8}-\d+")
FAILING = "FAILS"
"""A session whose markers carry this tag gets a permanent model error."""
MODEL_DELAY_S = 0.8


def slow_echo(request: dict[str, Any]) -> Reply:
    """Every marker of the request, after a delay; a permanent refusal for a failing session."""
    text = request_text(request)
    if FAILING in text:
        return dataclasses.replace(bad_request("this session is refused"), delay_s=MODEL_DELAY_S)
    return answer("markers: " + " ".join(dict.fromkeys(MARKER.findall(text))), delay_s=MODEL_DELAY_S)


@pytest.fixture(scope="module")
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer(default=slow_echo) as s:
        yield s


@pytest.fixture(scope="module")
def pipeline(
    service_settings: Settings, server: OpenAIServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Settings]:
    settings = scripted_pipeline_settings(
        service_settings, server.base_url, partitions=1, topic_prefix="sync",
        apps={APP: {"event_threshold": 0}}, job_timeout_s=30,
    )  # fmt: skip
    asyncio.run(create_topics(settings))
    with workers(settings, tmp_path_factory.mktemp("sync")) as procs:
        yield settings
        for p in procs:
            assert p.proc.poll() is None, p.log_text()[-4000:]


@pytest.fixture()
async def client(pipeline: Settings) -> AsyncIterator[DistillClient]:
    async with DistillClient(pipeline) as c:
        yield c


class ToolRun:
    """One session's events, each with its own marker: user turns, tool calls, tool results."""

    def __init__(self, tag: str = "") -> None:
        self.b = SessionBuilder(app=APP)
        self.tag = tag + uuid.uuid4().hex[:8]
        self.markers: list[str] = []
        self.calls = 0

    def _marker(self) -> str:
        marker = f"MS-{self.tag}-{self.b.n + 1}"
        self.markers.append(marker)
        return marker

    def user(self, text: str) -> SessionEvent:
        return self.b.user(f"{text} {self._marker()}")

    def call(self, name: str = "search") -> SessionEvent:
        self.calls += 1
        args = json.dumps({"query": f"航班 {self._marker()}"}, ensure_ascii=False)
        call = {"id": f"call-{self.calls}", "type": "function", "function": {"name": name, "arguments": args}}
        return self.b.event("assistant", None, message={"tool_calls": [call]})

    def result(self, name: str = "search") -> SessionEvent:
        content = f"结果 {self.calls}: 奥斯陆 {self._marker()}"
        return self.b.event("tool", content, message={"tool_call_id": f"call-{self.calls}", "name": name})

    def answer(self, text: str) -> SessionEvent:
        return self.b.assistant(f"{text} {self._marker()}")

    @property
    def key(self) -> SessionKey:
        return SessionKey(self.b.app_name, self.b.user_id, self.b.session)

    @property
    def last_event_id(self) -> str:
        return f"{self.b.session}-e{self.b.n}"


def model_calls(server: OpenAIServer, run: ToolRun) -> int:
    return sum(1 for r in server.requests if run.tag in r.text())


async def jobs_of(settings: Settings, run: ToolRun, *, at_least: int) -> list[dict[str, Any]]:
    def mine(records: list[Any]) -> list[dict[str, Any]]:
        jobs = [json.loads(r.value) for r in records]
        return [j for j in jobs if j["session_id"] == run.b.session]

    return mine(await read_topic(settings, settings.topics.jobs, until=lambda r: len(mine(r)) >= at_least))


@pytest.mark.parametrize("force", [False, True])
async def test_a_request_while_the_rounds_job_runs_returns_the_summary_covering_the_round(
    client: DistillClient, server: OpenAIServer, force: bool
) -> None:
    """The issue's case: user, tool call, tool result (its job starts), then the agent asks."""
    run = ToolRun()
    await client.publish_many([run.user("飞奥斯陆的航班?"), run.call(), run.result()])
    summary = await client.request_summary(run.key, timeout=30, force=force)
    assert summary is not None
    assert summary.version == 1 and summary.boundary.last_event_id == run.last_event_id
    assert set(MARKER.findall(summary.summary)) == set(run.markers), summary.summary
    # A forced request whose events are covered returns the covering summary: no second job.
    again = await client.request_summary(run.key, timeout=30, force=True)
    assert again is not None and again.version == 1 and again.summary == summary.summary
    assert model_calls(server, run) == 1


async def test_a_request_joining_a_job_that_fails_raises_the_jobs_failure(client: DistillClient) -> None:
    run = ToolRun(tag=FAILING)
    await client.publish_many([run.user("飞奥斯陆的航班?"), run.call(), run.result()])
    with pytest.raises(SummaryUnavailableError) as failed:
        await client.request_summary(run.key, timeout=30)
    failure = failed.value.failure
    assert failure.error_class not in ("NothingToSummarize", "SummarySkipped")
    if failure.error_class == "KeyCoolingDown":
        # The failure came back before the request reached the track side: no job left to join.
        assert "given up" in failure.reason, failure.reason
    else:
        assert "joined" in failure.reason and "this session is refused" in failure.reason, failure.reason


async def test_asking_before_each_model_call_of_a_run_makes_one_job_per_boundary(
    pipeline: Settings, client: DistillClient, server: OpenAIServer
) -> None:
    """``WithSyncSummaryIntraRun``: 3 tool rounds, the agent asks before every model call but the first."""
    run = ToolRun()
    await client.publish(run.user("订一张去奥斯陆的机票。"))  # the run's first model call asks nothing
    for _ in range(3):
        await client.publish_many([run.call(), run.result()])  # the model called a tool, the tool ran
        summary = await client.request_summary(run.key, timeout=30)  # its job is in flight: wait for it
        assert summary is not None and summary.boundary.last_event_id == run.last_event_id
        assert set(MARKER.findall(summary.summary)) == set(run.markers), summary.summary
    await client.publish(run.answer("已订好。"))  # the final answer: its own job, after the run

    def final(records: list[Any]) -> list[dict[str, Any]]:
        return [s for s in summaries_of(records) if s["session_id"] == run.b.session]

    summaries = final(await read_topic(pipeline, pipeline.topics.summaries,
                                       until=lambda r: len(final(r)) >= 4))  # fmt: skip
    versions = sorted({s["version"] for s in summaries})
    assert versions == [1, 2, 3, 4]
    assert set(MARKER.findall(summaries[-1]["summary"])) == set(run.markers)
    jobs = await jobs_of(pipeline, run, at_least=7)
    summarizing = {j["job_id"] for j in jobs if j.get("origin") != "join"}
    joined = {j["job_id"] for j in jobs if j.get("origin") == "join"}
    assert len(summarizing) == len(versions) and len(joined) == 3, jobs  # one job per boundary, one join per ask
    assert model_calls(server, run) == len(versions)
