"""Worker metrics: the in-flight gauge follows finished jobs, LLM latency times the model call only,
and the scrape endpoint serves every documented series."""

from __future__ import annotations

import asyncio
import socket
import urllib.request

import pytest
from prometheus_client import REGISTRY

from schemas import SessionSummary
from schemas.settings import Settings
from streams import metrics
from streams.app.coordinates import Coordinates
from streams.app.factory import TimedModel
from streams.app.pool import JobPool
from streams.errors import RetryableError
from streams.summarizer.model import ModelResponse
from streams.summarizer.request import ChatRequest
from tests.unit.app.test_summarize_handler import EVENTS, MemoryEventLog, job, memory_runtime
from tests.unit.summarizer.helpers import ScriptedModel


def _sample(name: str, labels: dict[str, str] | None = None) -> float:
    return REGISTRY.get_sample_value(name, labels or {}) or 0.0


async def test_in_flight_gauge_drops_when_jobs_finish() -> None:
    pool = JobPool(2, on_size=metrics.JOBS_IN_FLIGHT.set)
    release = asyncio.Event()

    async def run() -> None:
        await release.wait()

    for i in range(3):
        await pool.submit(f"k{i}", 0, i, run, lambda: None)
    assert _sample("distill_jobs_in_flight") == 3
    release.set()
    await pool.drain(None)
    assert _sample("distill_jobs_in_flight") == 0


class SlowModel:
    name = "slow"
    context_window: int | None = 100_000
    provider_budget: int | None = None

    def __init__(self, delay: float, fail: bool = False) -> None:
        self.delay, self.fail = delay, fail

    async def complete(self, request: ChatRequest) -> ModelResponse:
        await asyncio.sleep(self.delay)
        if self.fail:
            raise RetryableError("503")
        return ModelResponse(text="ok", model=self.name)


async def test_timed_model_observes_each_call_including_failures() -> None:
    count, total = _sample("distill_llm_latency_seconds_count"), _sample("distill_llm_latency_seconds_sum")
    request = ChatRequest(messages=[{"role": "user", "content": "hi"}])
    assert (await TimedModel(SlowModel(0.05)).complete(request)).text == "ok"
    with pytest.raises(RetryableError):
        await TimedModel(SlowModel(0.05, fail=True)).complete(request)
    assert _sample("distill_llm_latency_seconds_count") == count + 2
    assert 0.1 <= _sample("distill_llm_latency_seconds_sum") - total < 0.5


class SlowEventLog(MemoryEventLog):
    async def read(self, partition: int, start: int, end: int, key: bytes) -> list[object]:  # type: ignore[override]
        await asyncio.sleep(0.3)
        return await super().read(partition, start, end, key)


async def test_llm_latency_excludes_the_delta_read_and_the_rest_of_the_job() -> None:
    runtime = memory_runtime(TimedModel(ScriptedModel(default="s", context_window=100_000)), SlowEventLog(EVENTS))
    sent: list[str] = []

    async def send(topic: str, key: bytes, value: bytes, partition: int, headers: object) -> None:
        sent.append(topic)

    runtime.send = send
    count, total = _sample("distill_llm_latency_seconds_count"), _sample("distill_llm_latency_seconds_sum")
    tokens_out = _sample("distill_llm_tokens_total", {"direction": "out"})
    await runtime.run_job(job(3), Coordinates("jobs", 0, 0), b"k", None)
    assert sent == ["sum"]
    assert _sample("distill_llm_latency_seconds_count") == count + 1
    assert _sample("distill_llm_latency_seconds_sum") - total < 0.2  # the 0.3 s delta read is not in it
    assert _sample("distill_llm_tokens_total", {"direction": "out"}) >= tokens_out


async def test_a_summary_cut_to_max_summary_length_is_counted_and_its_record_says_so() -> None:
    # The model writes past the cap and answers the request to shorten with the same text.
    long = "First fact kept. " + "Second fact, the one a cut drops. " * 4
    settings = Settings.model_validate({"summary": {"max_summary_length": 40}})
    runtime = memory_runtime(ScriptedModel(default=long, context_window=100_000), settings=settings)
    sent: list[bytes] = []

    async def send(topic: str, key: bytes, value: bytes, partition: int, headers: object) -> None:
        sent.append(value)

    runtime.send = send
    cuts = _sample("distill_summary_length_cuts_total")
    await runtime.run_job(job(3), Coordinates("jobs", 0, 0), b"k", None)
    assert _sample("distill_summary_length_cuts_total") == cuts + 1
    record = SessionSummary.model_validate_json(sent[-1])
    assert record.summary == "First fact kept." and record.report.length_cut is not None
    assert [c.mode for c in record.report.calls] == ["standalone", "shorten"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_scrape_endpoint_serves_the_documented_series() -> None:
    metrics.EVENTS.labels("SessionEvent").inc(0)
    metrics.DEAD_LETTERS.labels("track", "ValidationError").inc(0)
    metrics.FAILURES.labels("summarize", "RetryableError", "yes").inc(0)
    metrics.TOKENS.labels("in").inc(0)
    metrics.set_consumer_lag([("ev", 0, 5)])
    port = _free_port()
    metrics.serve_metrics(port)
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    for name in metrics.DOCUMENTED:
        assert f"# HELP {name} " in body, name
    assert 'distill_consumer_lag{partition="0",topic="ev"} 5.0' in body
    assert 'distill_failures_total{error_class="RetryableError",retried="yes",stage="summarize"}' in body
    metrics.set_consumer_lag([])
