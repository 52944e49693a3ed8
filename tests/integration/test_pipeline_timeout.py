"""Timed-out jobs are re-emitted by the sweep, and never yield a second summary for a boundary.

One worker; the LLM hangs the first call well past ``job_timeout_s``; no
command is sent. The sweep re-emits the key's job (origin ``retry``) while the
first one hangs; whichever job finishes first publishes the summary, every
other copy is stale: exactly one summary for the boundary, versions 1, 2, ...
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
    create_topics,
    isolated_worker_settings,
    read_topic,
    summaries_of,
    workers,
)
from tests.support.openai_server import OpenAIServer, slow

pytestmark = pytest.mark.integration

HANG_S = 7.0
JOB_TIMEOUT_S = 2.0


async def test_hung_job_is_reemitted_and_the_boundary_is_summarized_once(
    isolated_settings: Settings, tmp_path: Path
) -> None:
    with OpenAIServer() as llm:
        llm.script(slow(HANG_S, "summary after a hang"))
        data = isolated_settings.model_dump()
        data["llm"].update(base_url=llm.base_url, api_key="k", max_retries=0, model="scripted-model", timeout_s=30)
        settings = isolated_worker_settings(Settings(**data), event_threshold=3, job_timeout_s=JOB_TIMEOUT_S)
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
