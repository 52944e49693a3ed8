"""The bounded failure policy of one job (``WorkerRuntime.run_job``), with in-memory ledger and log.

A job failing retryably is given up after ``job_max_attempts`` or at its
``job_timeout_s``, whichever comes first, with a failure record (``gave_up``,
the calls' report) and a dead letter; a hung call is cancelled at the timeout
and its late result is never published; a context-length refusal naming a
window is retried once with that window and the failure carries it; and two
jobs of one key running at once publish a version once (compare-and-set).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from typing import Any

import pytest

from schemas import DeadLetter, SessionSummary, SummaryFailure, SummaryJob
from schemas.settings import Settings
from streams.app.coordinates import Coordinates
from streams.app.runtime import Backoff, Topics, WorkerRuntime
from streams.app.summarize import JobResult, SummarizeHandler
from streams.app.track import TrackHandler
from streams.errors import RetryableError
from streams.rules.policy import policies_from_settings
from streams.summarizer import SummarizerLike, build_summarizer
from streams.summarizer.model import ContextLengthError
from tests.unit.app.test_summarize_handler import EVENTS, MemoryEventLog, MemoryLedger, job
from tests.unit.summarizer.helpers import ScriptedModel

COORDS = Coordinates("jobs", 0, 7)


class Ledger(MemoryLedger):
    def forget(self, partitions: set[int]) -> None:
        pass


class Sent:
    """The runtime's ``send``: records per topic, decoded."""

    def __init__(self) -> None:
        self.records: list[tuple[str, dict[str, Any]]] = []

    async def __call__(self, topic: str, key: bytes, value: bytes, partition: int, headers: object) -> None:
        self.records.append((topic, json.loads(value)))

    def on(self, topic: str) -> list[dict[str, Any]]:
        return [v for t, v in self.records if t == topic]


def runtime(model: ScriptedModel | None = None, **summary: Any) -> tuple[WorkerRuntime, Sent, Ledger]:
    settings = Settings.model_validate({"summary": summary})
    scripted = model or ScriptedModel(default="the summary", context_window=100_000)
    summarizer = build_summarizer(settings, app_name="app", model=scripted)

    def summarizer_for(app: str) -> SummarizerLike:
        return summarizer

    rt = WorkerRuntime(settings, Topics("ev", "jobs", "sum", "dl"),
                       TrackHandler(policies_from_settings(settings.summary, settings.llm.model)),
                       summarizer_for, backoff=Backoff(0.01, 0.02))  # fmt: skip
    ledger = Ledger()
    rt.ledger = ledger  # type: ignore[assignment]
    rt.summarize = SummarizeHandler(ledger, MemoryEventLog(EVENTS), summarizer_for)
    rt.cache_ready.set()
    sent = Sent()
    rt.send = sent
    return rt, sent, ledger


async def run(rt: WorkerRuntime, j: SummaryJob, limit: float = 5.0) -> None:
    await asyncio.wait_for(rt.run_job(j, COORDS, b"k", None), limit)


async def test_a_job_failing_retryably_is_given_up_after_its_max_attempts() -> None:
    model = ScriptedModel(*[RetryableError("LLM endpoint answered HTTP 500")] * 50, context_window=100_000)
    rt, sent, _ = runtime(model, job_max_attempts=3, job_timeout_s=30)
    await run(rt, job(3))
    assert len(model.requests) == 3
    [failure] = sent.on("sum")
    assert failure["type"] == "summary_failure" and failure["gave_up"] is True and failure["retryable"] is True
    assert failure["attempts"] == 3 and failure["job_id"] == job(3).job_id
    assert "HTTP 500" in failure["reason"] and "3 attempt" in failure["reason"]
    # the report lists every call the job made
    assert [c["outcome"] for c in failure["report"]["calls"]] == ["failed"] * 3
    [dl] = sent.on("dl")
    letter = DeadLetter.model_validate(dl)
    assert letter.stage == "summarize" and letter.error_class == "RetryableError" and "HTTP 500" in letter.reason
    assert SummaryJob.model_validate_json(base64.b64decode(letter.value_b64)).job_id == job(3).job_id
    assert [t for t, _ in sent.records] == ["sum", "dl"]  # no summary: the boundary stays


async def test_a_job_failing_retryably_is_given_up_at_its_timeout() -> None:
    model = ScriptedModel(*[RetryableError("HTTP 429")] * 10_000, context_window=100_000)
    rt, sent, _ = runtime(model, job_max_attempts=10_000, job_timeout_s=0.3)
    started = time.monotonic()
    await run(rt, job(3))
    took = time.monotonic() - started
    assert took < 0.6, took
    assert 2 <= len(model.requests) <= 40  # backoff between attempts, not a hot loop
    [failure] = sent.on("sum")
    assert failure["gave_up"] and failure["retryable"] and len(sent.on("dl")) == 1


async def test_a_hung_call_is_cancelled_at_the_timeout_and_its_late_result_never_published() -> None:
    rt, sent, _ = runtime(job_timeout_s=0.2)
    cancelled = asyncio.Event()

    async def hang(j: SummaryJob, partition: int, *slot: Any) -> JobResult:
        try:
            await asyncio.sleep(1.0)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        raise AssertionError("the hung call ran past its timeout")

    rt.summarize.handle = hang  # type: ignore[method-assign]
    started = time.monotonic()
    await run(rt, job(3))
    assert time.monotonic() - started < 0.5
    assert cancelled.is_set()
    await asyncio.sleep(1.0)  # where the late result would have come
    [failure] = sent.on("sum")
    assert failure["type"] == "summary_failure" and failure["error_class"] == "JobTimeoutError"
    assert failure["gave_up"] and failure["retryable"] and "job_timeout_s=0.2" in failure["reason"]
    assert len(sent.on("dl")) == 1


async def test_a_hung_model_call_is_reported_on_the_failure() -> None:
    class Hanging(ScriptedModel):
        async def complete(self, request: Any) -> Any:
            self.requests.append(request)
            await asyncio.sleep(5)
            raise AssertionError("not cancelled")

    model = Hanging(context_window=100_000)
    rt, sent, _ = runtime(model, job_timeout_s=0.2)
    await run(rt, job(3))
    [failure] = sent.on("sum")
    assert len(model.requests) == 1
    calls = failure["report"]["calls"]
    assert len(calls) == 1 and calls[0]["outcome"] == "failed" and "CancelledError" in calls[0]["error"]
    assert not [s for s in sent.on("sum") if s["type"] == "summary"]


async def test_a_permanent_failure_is_given_up_at_once() -> None:
    model = ScriptedModel(ContextLengthError("context_length_exceeded"), ContextLengthError("context_length_exceeded"),
                          context_window=100_000)  # fmt: skip
    rt, sent, _ = runtime(model)
    await run(rt, job(3))
    assert len(model.requests) == 2  # the summarizer's own half-budget retry, no more
    [failure] = sent.on("sum")
    assert failure["gave_up"] and failure["retryable"] is False and failure["context_window"] is None


async def test_a_context_refusal_naming_the_window_is_retried_with_it_and_kept_on_the_failure() -> None:
    refusal = "This model's maximum context length is 900 tokens. However, your messages resulted in 1800 tokens."
    model = ScriptedModel(*[ContextLengthError(refusal, 900)] * 10, context_window=100_000)
    rt, sent, _ = runtime(model)
    await run(rt, job(3))
    # two calls at the configured budget (full, half), two budgeted with the learned window, then give up
    budgets = [c["budget_tokens"] for c in sent.on("sum")[0]["report"]["calls"]]
    assert len(model.requests) == 4 and budgets[0] > 10_000 and all(b <= 900 for b in budgets[2:]), budgets
    [failure] = sent.on("sum")
    assert failure["context_window"] == 900 and failure["retryable"] is False


async def test_a_context_refusal_then_a_summary_within_the_learned_window() -> None:
    refusal = "This model's maximum context length is 900 tokens."
    model = ScriptedModel(ContextLengthError(refusal, 900), ContextLengthError(refusal, 900), "fits now",
                          context_window=100_000)  # fmt: skip
    rt, sent, _ = runtime(model)
    await run(rt, job(3))
    [summary] = sent.on("sum")
    assert summary["type"] == "summary" and summary["summary"] == "fits now" and summary["version"] == 1


async def test_a_job_with_a_learned_window_budgets_with_it() -> None:
    model = ScriptedModel(context_window=100_000)
    rt, sent, _ = runtime(model)
    await run(rt, job(3).model_copy(update={"summary_context_window": 1000}))
    [summary] = sent.on("sum")
    assert summary["report"]["calls"][0]["budget_tokens"] <= 700


@pytest.mark.parametrize("second_origin", ["trigger", "retry"])
async def test_two_jobs_of_one_key_running_at_once_publish_a_version_once(second_origin: str) -> None:
    # A job and its re-emission (or a zombie of a revoked assignment) both reach the model on
    # version 0: both results are version 1, only the first may be published.
    rt, sent, ledger = runtime()
    both_in = asyncio.Event()
    waiting = 0
    handle = rt.summarize.handle

    async def gated(j: SummaryJob, partition: int, *slot: Any) -> JobResult:
        nonlocal waiting
        result = await handle(j, partition, *slot)
        waiting += 1
        if waiting == 2:
            both_in.set()
        await both_in.wait()
        return result

    rt.summarize.handle = gated  # type: ignore[method-assign]
    first, second = job(3), job(5, origin=second_origin)
    await asyncio.gather(run(rt, first), run(rt, second))
    versions = [(s["version"], s["job_id"]) for s in sent.on("sum") if s["type"] == "summary"]
    assert [v for v, _ in versions] == [1], versions
    head = ledger.head(0, next(iter(ledger.heads))[1])
    assert head is not None and head.version == 1 and head.job_id == versions[0][1]


async def test_a_result_built_on_an_older_head_is_dropped() -> None:
    rt, sent, ledger = runtime()
    handle = rt.summarize.handle
    first = await handle(job(3), 0)
    assert isinstance(first.record, SessionSummary)
    ledger.record(0, first.record, first.events_offset)  # published meanwhile by another run
    stale = first.record.model_copy(update={"job_id": "other", "summary": "a different text"})
    await rt._publish_checked(JobResult("summary", stale, 3), 0, b"k", {})
    assert sent.on("sum") == []
    # a failure answer is not subject to the head check
    answer = SummaryFailure.model_validate({**json.loads(first.record.model_dump_json(include={
        "app_name", "user_id", "session_id", "filter_key", "job_id", "created_at"})),
        "error_class": "SummarySkipped", "reason": "nothing"})  # fmt: skip
    await rt._publish_checked(JobResult("skipped", answer), 0, b"k", {})
    assert len(sent.on("sum")) == 1


async def test_a_re_emission_of_a_job_just_given_up_is_answered_without_a_model_call() -> None:
    model = ScriptedModel(*[RetryableError("HTTP 503")] * 2, context_window=100_000)
    rt, sent, _ = runtime(model, job_max_attempts=2)
    await run(rt, job(3))
    await run(rt, job(5, origin="retry"))  # the sweep re-emitted it while it was failing
    assert len(model.requests) == 2
    given_up, superseded = sent.on("sum")
    assert given_up["gave_up"] is True
    assert superseded["gave_up"] is False and superseded["error_class"] == "JobSupersededError"
    assert superseded["job_id"] == job(5).job_id  # releases the re-emission's in-flight mark
    assert len(sent.on("dl")) == 1


async def test_the_lines_of_a_job_name_every_model_call_its_attempts_made(caplog: pytest.LogCaptureFixture) -> None:
    """``distill replay`` adds up these counts: a 500 before the summary is a call paid for."""
    caplog.set_level(logging.INFO, logger="streams.app.runtime")
    model = ScriptedModel(RetryableError("HTTP 500"), RetryableError("HTTP 500"), "摘要 M1", context_window=100_000)
    rt, _, _ = runtime(model, job_max_attempts=5, job_timeout_s=30)
    await run(rt, job(3))
    made = next(r for r in caplog.records if r.getMessage() == "summary made")
    assert made.__dict__["model_calls"] == len(model.requests) == 3

    model = ScriptedModel(*[RetryableError("HTTP 429")] * 10, context_window=100_000)
    rt, _, _ = runtime(model, job_max_attempts=2, job_timeout_s=30)
    await run(rt, job(3))
    given_up = next(r for r in caplog.records if r.getMessage() == "summary job given up")
    assert given_up.__dict__["model_calls"] == len(model.requests) == 2


def test_a_failed_attempts_calls_are_counted_by_one_line_of_the_job_only() -> None:
    """A job run again after an epoch switch logs a second line: its earlier failed calls are not in it again."""
    from schemas.summaries import CallReport
    from streams.app.runtime import _Run

    run = _Run(job(3))
    run.calls.append(CallReport(mode="standalone", model="m", outcome="failed", error="HTTP 500"))
    assert run.model_calls() == 1  # the first run's "summary made"
    assert run.model_calls() == 0  # the run after the switch: nothing new failed
    run.calls += [
        CallReport(mode="standalone", model="m", outcome="failed"),
        CallReport(mode="custom_response", model="m"),
    ]
    assert run.model_calls() == 1  # a callback's answer is no call
