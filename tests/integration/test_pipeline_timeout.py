"""Timed-out jobs are re-emitted by the sweep, and never yield a second summary for a boundary.

One worker; the LLM hangs the first call well past ``job_timeout_s``; no
command is sent. The sweep re-emits the key's job (origin ``retry``) while the
first one hangs; whichever job finishes first publishes the summary, every
other copy is stale: exactly one summary for the boundary, versions 1, 2, ...

After a SIGKILL, a job that was in flight is known only from the changelog:
the restarted worker's sweep finds it by its one scan of the recovered table
(the sweep's index is otherwise fed by the table writes) and re-emits it.
"""

from __future__ import annotations

import asyncio
import json
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

HANG_S = 7.0
JOB_TIMEOUT_S = 2.0


async def test_hung_job_is_reemitted_and_the_boundary_is_summarized_once(
    isolated_settings: Settings, tmp_path: Path
) -> None:
    with OpenAIServer() as llm:
        llm.script(slow(HANG_S, "summary after a hang"))
        settings = scripted_pipeline_settings(
            isolated_settings, llm.base_url, llm={"timeout_s": 30}, event_threshold=3, job_timeout_s=JOB_TIMEOUT_S
        )
        await create_topics(settings)
        b = SessionBuilder(app="hang")
        events = [b.user("Find a flat in Porto."), b.assistant("Three listings found."),
                  b.user("Pick the cheapest."), b.assistant("Rua das Flores, 700 EUR.")]  # fmt: skip
        with workers(settings, tmp_path) as procs:
            async with DistillClient(settings) as client:
                await client.publish_many(events)

            def retried(records: list[Any]) -> bool:
                return any(json.loads(r.value).get("origin") == "retry" for r in records)

            jobs = await read_topic(settings, settings.topics.jobs, until=retried, timeout=25)
            await read_topic(settings, settings.topics.summaries, min_records=1, timeout=25)
            # the re-emitted copies queue behind the hung call; give them time to run (stale)
            await asyncio.sleep(JOB_TIMEOUT_S + 1)
            summaries = summaries_of(await read_topic(settings, settings.topics.summaries, min_records=1))
            assert procs[0].proc.poll() is None, procs[0].log_text()[-3000:]
        mine = [json.loads(r.value) for r in jobs]
        mine = [j for j in mine if j.get("session_id") == b.session]
        origins = [j["origin"] for j in mine]
        assert origins[0] == "trigger" and "retry" in origins, origins
        retry = next(j for j in mine if j["origin"] == "retry")
        assert retry["upto"]["last_event_id"] == events[-1].event_id
        assert len(llm.requests) == 1  # the re-emitted copies were stale: no second model call
        ours = [s for s in summaries if s["session_id"] == b.session]
        assert [s["version"] for s in ours] == [1], ours
        assert ours[0]["boundary"]["last_event_id"] == events[-1].event_id
        assert ours[0]["summary"]


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
