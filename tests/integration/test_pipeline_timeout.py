"""A hung model call is cancelled at ``job_timeout_s``; a job lost at a SIGKILL is re-emitted.

One worker; the LLM hangs the first call well past ``job_timeout_s``. The
summarize side cancels it at the timeout and answers the job with a failure
record (``JobTimeoutError``) and a dead letter; the late answer is never
published, and the sweep's re-emission of the job makes no second call. The
key then cools down (event time): an event within the cooldown makes no job,
the first one after it (the half-open retry) summarizes every event once.

After a SIGKILL, a job that was in flight is known only from the changelog:
the restarted worker's sweep finds it by its one scan of the recovered table
(the sweep's index is otherwise fed by the table writes) and re-emits it.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

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
from tests.integration.test_pipeline_guarantees import wait_for_assignment
from tests.integration.test_pipeline_rocksdb import wait_committed
from tests.support.openai_server import OpenAIServer, slow

pytestmark = pytest.mark.integration

# The job timeout covers the whole job (ledger catch-up, the delta read, the call): under a loaded
# machine (CI runs test files in parallel) a worker's first job took over 5 s to reach the model.
HANG_S = 16.0
JOB_TIMEOUT_S = 8.0
COOLDOWN_S = 30.0


def _of(records: list[Any], session: str, kind: str | None = None) -> list[dict[str, Any]]:
    values = [json.loads(r.value) for r in records]
    return [v for v in values if v.get("session_id") == session and (kind is None or v.get("type") == kind)]


async def test_a_hung_call_is_cancelled_at_the_timeout_and_never_published_then_the_key_cools_down(
    isolated_settings: Settings, tmp_path: Path
) -> None:
    with OpenAIServer() as llm:
        llm.script(slow(HANG_S, "late summary after a hang"))
        settings = scripted_pipeline_settings(
            isolated_settings, llm.base_url, llm={"timeout_s": 30}, event_threshold=3, job_timeout_s=JOB_TIMEOUT_S,
            failure_cooldown_s=COOLDOWN_S,
        )  # fmt: skip
        await create_topics(settings)
        b = SessionBuilder(app="hang")
        events = [b.user("Find a flat in Porto."), b.assistant("Three listings found."),
                  b.user("Pick the cheapest."), b.assistant("Rua das Flores, 700 EUR.")]  # fmt: skip
        with workers(settings, tmp_path) as procs:
            async with DistillClient(settings) as client:
                await client.publish_many(events)
                records = await read_topic(settings, settings.topics.summaries, timeout=40,
                                           until=lambda rs: _of(rs, b.session, "summary_failure"))  # fmt: skip
                seen = time.monotonic()
                assert llm.requests, procs[0].diagnosis()
                took = seen - llm.requests[0].at
                print(f"\nhung call: first failure record {took:.2f} s after the call (job_timeout_s={JOB_TIMEOUT_S})")
                [failure] = _of(records, b.session, "summary_failure")
                assert failure["error_class"] == "JobTimeoutError" and failure["gave_up"] is True
                assert took < JOB_TIMEOUT_S + 3.0, took
                letters = await read_topic(settings, settings.topics.dead_letters, min_records=1, timeout=20)
                assert any(json.loads(r.value)["error_class"] == "JobTimeoutError" for r in letters)
                # where the hung call's late answer would have come: nothing is published
                await asyncio.sleep(max(0.0, llm.requests[0].at + HANG_S + 1.5 - time.monotonic()))
                records = await read_topic(settings, settings.topics.summaries, min_records=1)
                assert not _of(records, b.session, "summary")
                assert len(llm.requests) == 1  # the sweep's re-emission made no second call
                # within the cooldown (event time): no job, no call
                await client.publish(b.assistant("Viewing booked for Saturday.", gap_s=5.0))
                await asyncio.sleep(3.0)
                assert len(llm.requests) == 1
                # the first event after it: the half-open retry summarizes everything once
                last = b.assistant("Saturday 10:00 confirmed.", gap_s=COOLDOWN_S)
                await client.publish(last)
                records = await read_topic(settings, settings.topics.summaries, timeout=30,
                                           until=lambda rs: _of(rs, b.session, "summary"))  # fmt: skip
            assert procs[0].proc.poll() is None, procs[0].log_text()[-3000:]
        ours = summaries_of(records)
        ours = [s for s in ours if s["session_id"] == b.session]
        assert [s["version"] for s in ours] == [1], ours
        assert ours[0]["boundary"]["last_event_id"] == last.event_id
        assert "late summary" not in ours[0]["summary"]
        assert len(llm.requests) == 2


RESTART_TIMEOUT_S = 8.0


def _origins(records: list[Any], session: str) -> list[str]:
    values = [json.loads(r.value) for r in records]
    return [v.get("origin") for v in values if isinstance(v, dict) and v.get("session_id") == session]


@pytest.mark.parametrize("store", ["memory://", "rocksdb://"])
async def test_job_in_flight_at_a_sigkill_is_reemitted_by_the_restarted_worker(
    isolated_settings: Settings, tmp_path: Path, store: str
) -> None:
    with OpenAIServer() as llm:
        # The first worker's call hangs until it is killed; the restarted worker's re-run of the
        # (unacked) job hangs past the timeout too, so the key is still in flight at its sweeps.
        llm.script(slow(60.0, "never read"), slow(25.0, "summary after the restart"))
        settings = scripted_pipeline_settings(
            isolated_settings, llm.base_url, llm={"timeout_s": 90},
            worker={"store": store, "data_dir": str(tmp_path / "faust")},
            event_threshold=3, job_timeout_s=RESTART_TIMEOUT_S,
        )  # fmt: skip
        await create_topics(settings)
        b = SessionBuilder(app="restart")
        events = [b.user("Book a table for two."), b.assistant("Which evening?"),
                  b.user("Friday at eight."), b.assistant("Booked at Tasca, Friday 20:00.")]  # fmt: skip

        first = WorkerProcess(settings, tmp_path / "worker-1.log")
        try:
            await wait_for_assignment(first)
            async with DistillClient(settings) as client:
                await client.publish_many(events)
            await read_topic(settings, settings.topics.jobs, until=lambda rs: "trigger" in _origins(rs, b.session))
            await wait_committed(settings, settings.topics.events)  # the in-flight state is on the changelog
        finally:
            first.kill()
            first.stop()
        before = _origins(await read_topic(settings, settings.topics.events), b.session)
        assert "retry" not in before, "the job timed out before the kill: nothing left to prove"

        second = WorkerProcess(settings, tmp_path / "worker-2.log")
        try:
            jobs = await read_topic(
                settings, settings.topics.jobs, until=lambda rs: "retry" in _origins(rs, b.session), timeout=90
            )
            assert second.proc.poll() is None, second.log_text()[-3000:]
            seeded = [json.loads(line) for line in second.log_text().splitlines() if '"sweep index seeded"' in line]
        finally:
            second.stop()
    assert "retry" in _origins(jobs, b.session), second.log_text()[-3000:]
    assert seeded and seeded[0]["watched"] >= 1, second.log_text()[-3000:]
