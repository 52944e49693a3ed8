"""Summaries of different sessions run concurrently; ingestion keeps flowing during slow LLM calls.

One worker, ``async_summary_num=4``, every LLM call takes ~1 s. Eight sessions
fire one job each: run one at a time that is ~8 s, four at a time ~2 s. While
those calls are in flight, four more sessions are published: their events are
tracked and their jobs emitted at once, not after the slow calls.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from schemas import SessionEvent
from schemas.settings import Settings
from streams.client import DistillClient
from tests.integration.pipeline_support import (
    SessionBuilder,
    create_topics,
    read_topic,
    scripted_pipeline_settings,
    summaries_of,
    workers,
)
from tests.support.openai_server import OpenAIServer, delayed, echo_summary

pytestmark = pytest.mark.integration

CALL_S = 1.0
SESSIONS = 8


def session_events(b: SessionBuilder) -> list[SessionEvent]:
    return [b.user(f"Plan step one for {b.session}"), b.assistant("Step one planned."),
            b.user("And step two?"), b.assistant("Step two planned too.")]  # fmt: skip


async def test_slow_llm_calls_run_concurrently_and_ingestion_keeps_flowing(
    isolated_settings: Settings, tmp_path: Path
) -> None:
    with OpenAIServer(default=delayed(echo_summary, CALL_S)) as llm:
        settings = scripted_pipeline_settings(isolated_settings, llm.base_url, event_threshold=3, async_summary_num=4)
        await create_topics(settings)
        first = [SessionBuilder(app="conc") for _ in range(SESSIONS)]
        later = [SessionBuilder(app="conc") for _ in range(4)]
        with workers(settings, tmp_path) as procs:
            async with DistillClient(settings) as client:
                await client.publish_many([e for b in first for e in session_events(b)])
                deadline = time.monotonic() + 25
                while not llm.requests and time.monotonic() < deadline:
                    await asyncio.sleep(0.02)
                assert llm.requests, procs[0].diagnosis()
                # the slow calls are in flight now: publish more sessions
                later_published = time.time()
                await client.publish_many([e for b in later for e in session_events(b)])

            wanted = {b.session for b in first + later}

            def all_summarized(records: list[Any]) -> bool:
                return wanted <= {s["session_id"] for s in summaries_of(records)}

            summaries = await read_topic(settings, settings.topics.summaries, until=all_summarized, timeout=25)
            jobs = await read_topic(settings, settings.topics.jobs, min_records=len(wanted), timeout=10)
            assert procs[0].proc.poll() is None, procs[0].log_text()[-3000:]
        assert all_summarized(summaries)
        first_ids = {b.session for b in first}
        later_ids = {b.session for b in later}
        done_at = {json.loads(r.value)["session_id"]: r.timestamp / 1000 for r in summaries}
        first_done = max(t for sid, t in done_at.items() if sid in first_ids)

        # concurrency: 8 calls of ~1 s each, 4 at a time
        started = [r.at for r in llm.requests]
        span = (max(done_at.values()) - min(done_at.values())) if done_at else 0.0
        assert len(llm.requests) == SESSIONS + len(later)
        offsets = [round(t - started[0], 2) for t in started]
        assert sum(1 for t in offsets if t < 0.9 * CALL_S) >= 4, offsets
        first_requests = sorted(started)[:SESSIONS]
        assert first_requests[-1] - first_requests[0] < 0.6 * SESSIONS * CALL_S, "the first wave ran serially"
        assert span < SESSIONS * CALL_S * 0.75, span

        # ingestion: the later sessions' jobs were emitted while the first wave's calls were running
        job_at = {json.loads(r.value)["session_id"]: r.timestamp / 1000 for r in jobs}
        for sid in later_ids:
            assert job_at[sid] - later_published < CALL_S, (sid, job_at[sid] - later_published)
            assert job_at[sid] < first_done, "a job of a later session waited for the slow calls"
