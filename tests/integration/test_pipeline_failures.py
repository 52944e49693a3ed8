"""The bounded failure policy end to end: real Kafka, the real worker, the real HTTP model server.

The model refuses every call — HTTP 500 (transient) or a context-length
refusal naming a small window (permanent). A session's first job is given up
after ``job_max_attempts`` calls with a failure record and a dead letter; then
40 more assistant events, one second apart in event time, make only the
half-open retries the cooldown lets through, never a job per event. Measured
and printed: the time from the model's first refused call to the first
failure record, and the LLM calls per key while the model refuses.
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
    create_topics,
    read_topic,
    scripted_pipeline_settings,
    workers,
)
from tests.support.openai_server import OpenAIServer, Reply, context_length_exceeded, server_error

pytestmark = pytest.mark.integration

MAX_ATTEMPTS = 3
COOLDOWN_S = 15.0
LATER_EVENTS = 40


def _failures(records: list[Any], session: str) -> list[dict[str, Any]]:
    values = [json.loads(r.value) for r in records]
    return [v for v in values if v.get("session_id") == session and v.get("type") == "summary_failure"]


def _refuse_500(request: dict[str, Any]) -> Reply:
    return server_error(500)


def _refuse_context(request: dict[str, Any]) -> Reply:
    return context_length_exceeded(tokens=5000, limit=3000)


# Calls of the first job and of the half-open retry: 500s use every attempt; a context refusal
# costs the full and half budget, then both again with the window it named (which the key keeps:
# the half-open retry starts with it).
@pytest.mark.parametrize(("refusal", "calls_per_job"), [(_refuse_500, (MAX_ATTEMPTS, MAX_ATTEMPTS)),
                                                        (_refuse_context, (4, 2))],
                         ids=["http-500", "context-length"])  # fmt: skip
async def test_while_the_model_refuses_a_key_gets_a_failure_record_and_bounded_calls(
    isolated_settings: Settings, tmp_path: Path, refusal: Any, calls_per_job: tuple[int, int]
) -> None:
    with OpenAIServer(default=refusal) as llm:
        settings = scripted_pipeline_settings(
            isolated_settings, llm.base_url, event_threshold=3, job_timeout_s=20.0, job_max_attempts=MAX_ATTEMPTS,
            failure_cooldown_s=COOLDOWN_S, failure_cooldown_max_s=600.0,
        )  # fmt: skip
        await create_topics(settings)
        b = SessionBuilder(app="refused")
        first = [b.user("Plan a trip to Kyoto."), b.assistant("Which month?"),
                 b.user("April, for the cherry blossoms."), b.assistant("Booked 3 nights in Gion.")]  # fmt: skip
        with workers(settings, tmp_path) as procs:
            async with DistillClient(settings) as client:
                await client.publish_many(first)
                records = await read_topic(settings, settings.topics.summaries, timeout=60,
                                           until=lambda rs: _failures(rs, b.session))  # fmt: skip
                seen = time.monotonic()
                assert llm.requests and _failures(records, b.session), procs[0].diagnosis()
                down_to_failure = seen - llm.requests[0].at
                [failure] = _failures(records, b.session)
                assert failure["gave_up"] is True and len(llm.requests) == calls_per_job[0]
                assert len(failure["report"]["calls"]) == calls_per_job[0]
                if refusal is _refuse_context:
                    assert failure["context_window"] == 3000 and failure["retryable"] is False
                else:
                    assert failure["retryable"] is True and failure["attempts"] == MAX_ATTEMPTS
                letters = await read_topic(settings, settings.topics.dead_letters, min_records=1, timeout=20)
                assert len(letters) == 1
                # 40 more assistant events, one a second (event time), sent at once
                later = [b.assistant(f"Day {i}: temples and tea.") for i in range(LATER_EVENTS)]
                await client.publish_many(later)
                # the half-open retry fails too: wait for its failure, then for anything else to happen
                await read_topic(
                    settings,
                    settings.topics.summaries,
                    timeout=60,
                    until=lambda rs: len([f for f in _failures(rs, b.session) if f["gave_up"]]) >= 2,
                )
                await asyncio.sleep(5.0)
                records = await read_topic(settings, settings.topics.summaries, min_records=1)
            assert procs[0].proc.poll() is None, procs[0].log_text()[-3000:]
        given_up = [f for f in _failures(records, b.session) if f["gave_up"]]
        calls = len(llm.requests)
        print(f"\n{refusal.__name__}: first failure record {down_to_failure:.2f} s after the first refused call; "
              f"{calls} LLM calls for {len(first) + LATER_EVENTS} events ({len(given_up)} jobs given up)")  # fmt: skip
        # a job at the first trigger, one half-open retry 15 s (event time) later, then a cooldown of
        # 30 s that the remaining events do not reach
        assert len(given_up) == 2, given_up
        assert calls == sum(calls_per_job), calls
        assert down_to_failure < 10.0
