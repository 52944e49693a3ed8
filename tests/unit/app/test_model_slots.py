"""``async_summary_num`` bounds a worker's model calls, not its jobs (``WorkerRuntime``'s model slots).

Jobs go through the runtime's real pool. A job the cache answers needs no model
call, so it must not queue behind jobs waiting on a slow model (a replay answered
from the cache ran at the model's pace: 4 jobs at a time, each holding its slot
through its publish). Model calls stay bounded, and the wait for a slot does not
count against a job's ``job_timeout_s``.
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any

from schemas import SummaryJob
from streams.app.cache import SummaryCache
from streams.app.runtime import WorkerRuntime
from tests.unit.app.test_failure_policy import COORDS, Sent, runtime
from tests.unit.app.test_summarize_handler import job
from tests.unit.summarizer.helpers import ScriptedModel


class HeldModel(ScriptedModel):
    """Answers at once until ``hold`` is set; then each call waits for ``release``. Counts calls at once."""

    def __init__(self) -> None:
        super().__init__(default="the summary", context_window=100_000)
        self.hold = False
        self.release = asyncio.Event()
        self.active = 0
        self.most = 0
        self.entered = 0

    async def complete(self, request: Any) -> Any:
        self.entered += 1
        self.active += 1
        self.most = max(self.most, self.active)
        try:
            if self.hold:
                await self.release.wait()
            return await super().complete(request)
        finally:
            self.active -= 1


def of_key(j: SummaryJob, filter_key: str) -> SummaryJob:
    """``j`` for another filter key of the session (its own head, its own pool key; same events)."""
    return j.model_copy(update={"filter_key": filter_key, "job_id": f"{j.job_id}-{filter_key}"})


async def submit(rt: WorkerRuntime, key: str, j: SummaryJob, offset: int) -> None:
    assert await rt.pool.submit(key, 0, offset, partial(rt.run_job, j, COORDS, b"k", None), lambda: None)


async def until(condition: Any, timeout: float = 2.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.005)


def summaries(sent: Sent) -> list[dict[str, Any]]:
    return [s for s in sent.on("sum") if s["type"] == "summary"]


async def test_a_job_the_cache_answers_does_not_wait_for_the_jobs_at_the_model() -> None:
    model = HeldModel()
    rt, sent, _ = runtime(model, async_summary_num=1, job_timeout_s=30)
    rt.summarize.cache = rt.cache = SummaryCache()
    # The cached answer of job(3): what a first run of it produced.
    first = await rt.summarize.handle(job(3), 0)
    assert first.outcome == "summary" and first.input_hash
    rt.cache.put(first.input_hash, first.record)  # type: ignore[arg-type]
    model.hold = True
    await submit(rt, "slow", of_key(job(3), "slow"), 1)  # a model call: holds the only slot
    await until(lambda: model.active == 1)
    await submit(rt, "cached", job(3), 2)
    await until(lambda: len(summaries(sent)) == 1)  # before: behind the held call, for as long as it held
    assert model.active == 1 and summaries(sent)[0]["filter_key"] == ""
    model.release.set()
    await until(lambda: len(summaries(sent)) == 2)


async def test_model_calls_stay_within_async_summary_num() -> None:
    model = HeldModel()
    model.hold = True
    rt, sent, _ = runtime(model, async_summary_num=2, job_timeout_s=30)
    for i in range(6):
        await submit(rt, f"k{i}", of_key(job(3), f"k{i}"), i)
    await until(lambda: model.active == 2)
    await asyncio.sleep(0.05)
    assert model.active == 2 and model.entered == 2
    model.release.set()
    await until(lambda: len(summaries(sent)) == 6)
    assert model.most == 2 and len(model.requests) == 6


async def test_the_wait_for_a_model_slot_does_not_count_against_the_jobs_timeout() -> None:
    rt, sent, _ = runtime(async_summary_num=1, job_timeout_s=0.3)
    await rt.model_slots.acquire()  # another job's call holds the only slot ...
    await submit(rt, "b", job(3), 1)
    await asyncio.sleep(0.6)  # ... for twice b's timeout
    assert sent.on("sum") == []
    rt.model_slots.release()
    await until(lambda: len(sent.on("sum")) == 1)
    # A clock that kept running while b waited for the slot would have timed b out.
    [summary] = sent.on("sum")
    assert summary["type"] == "summary", summary
