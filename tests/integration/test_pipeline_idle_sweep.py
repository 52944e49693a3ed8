"""The idle sweep (``summary.idle_summary_after_s``) after a job that ran while events came in.

The events published while a key's job is in flight lie after its target; when the session then
goes quiet, only the idle sweep summarizes them. The job's emission time stayed on the key after
its summary came back, and the sweep passes over a key with one: those events were in no summary
until the session's next event, which may never come. The oracle: a marker in every event and a
model that echoes the markers it was sent (the previous summary's and the delta's).
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from schemas.settings import Settings
from streams.client import DistillClient
from tests.integration.pipeline_support import (
    MK_MARKER,
    MarkedSession,
    create_topics,
    echo_mk_markers,
    read_topic,
    scripted_pipeline_settings,
    summaries_of,
    workers,
)
from tests.support.openai_server import OpenAIServer, request_text

pytestmark = pytest.mark.integration

HOLD = "HOLD-THE-ANSWER"
"""A request whose text holds this is answered once the test opens the gate."""


class GatedServer(OpenAIServer):
    """The echoing model; a request carrying :data:`HOLD` waits for :attr:`gate`."""

    def __init__(self) -> None:
        super().__init__(default=echo_mk_markers)
        self.gate = threading.Event()
        self.held = threading.Event()
        """Set once a held request came in."""

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.json()  # aiohttp keeps the body: the base handler reads it again
        if HOLD in request_text(body):
            self.held.set()
            while not self.gate.is_set():
                await asyncio.sleep(0.05)
        return await super()._handle(request)


async def test_events_that_came_while_a_job_ran_are_summarized_by_the_idle_sweep(
    isolated_settings: Settings, tmp_path: Path
) -> None:
    with GatedServer() as llm:
        settings = scripted_pipeline_settings(
            isolated_settings, llm.base_url, partitions=1, event_threshold=1, idle_summary_after_s=1.0,
            job_timeout_s=600, async_summary_num=2,
        )  # fmt: skip
        await create_topics(settings)
        quiet = MarkedSession("idle", text="held " + HOLD + " {n}")
        probe = MarkedSession("idle")
        with workers(settings, tmp_path) as procs:
            async with DistillClient(settings) as client:
                await client.publish_many(quiet.events(2))  # a model output: the job up to event 2
                for _ in range(1200):  # at most a minute
                    if llm.held.is_set():
                        break
                    await asyncio.sleep(0.05)
                assert llm.held.is_set(), procs[0].diagnosis()
                quiet.text = "and then {n}"
                (late,) = quiet.events(1)  # a user turn while the job runs: no trigger of its own
                assert late.message.role == "user"
                await client.publish(late)
                # Another session's job, on the same (only) partition: once it is on the jobs topic the
                # track side has folded the late event, before the held job's summary comes back.
                await client.publish_many(probe.events(2))

                def probe_job(records: list[Any]) -> bool:
                    return any(json.loads(r.value).get("session_id") == probe.b.session for r in records)

                assert probe_job(await read_topic(settings, settings.topics.jobs, until=probe_job, timeout=60))
                llm.gate.set()

            def all_of_quiet(records: list[Any]) -> bool:
                return any(
                    s["session_id"] == quiet.b.session and set(quiet.markers) <= set(MK_MARKER.findall(s["summary"]))
                    for s in summaries_of(records)
                )

            records = await read_topic(settings, settings.topics.summaries, until=all_of_quiet, timeout=60)
            assert procs[0].proc.poll() is None, procs[0].log_text()[-3000:]
        mine = [s for s in summaries_of(records) if s["session_id"] == quiet.b.session]
        assert all_of_quiet(records), [(s["version"], s["boundary"], s["summary"]) for s in mine]
        last = mine[-1]
        assert last["boundary"]["last_event_id"] == quiet.last_event_id
        assert last["report"]["trigger"]["name"] == "idle_sweep", last["report"]["trigger"]
