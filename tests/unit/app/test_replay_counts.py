"""``distill replay`` counts the summaries its run made, not only those it saw published.

A worker whose jobs partition is revoked while a summary's send is in flight is cancelled
after the record went out and before it logged it; the partition's next owner then finds the
version taken and runs nothing. The model was called once all the same: the run's count of
LLM calls must say so (a two-worker replay reported 1,595 calls for 1,600 redone boundaries).
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest

from streams.app.coordinates import Coordinates
from streams.cli.replay_cmd import _outcomes
from tests.unit.app.test_summarize_handler import job, memory_runtime
from tests.unit.summarizer.helpers import ScriptedModel


async def test_a_summary_whose_send_is_cut_by_a_revocation_is_counted_as_made(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runtime = memory_runtime(ScriptedModel(default="摘要 M1", context_window=100_000))
    sent: list[bytes] = []
    in_flight = asyncio.Event()

    async def send(topic: str, key: bytes, value: bytes, partition: int, headers: object) -> None:
        sent.append(value)  # the record is out; its acknowledgement never comes before the revocation
        in_flight.set()
        await asyncio.Event().wait()

    runtime.send = send
    caplog.set_level(logging.INFO, logger="streams.app.runtime")
    task = asyncio.create_task(runtime.run_job(job(3), Coordinates("jobs", 0, 0), b"k", None))
    await asyncio.wait_for(in_flight.wait(), 10)
    task.cancel()  # the revocation
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(sent) == 1 and json.loads(sent[0])["summary"] == "摘要 M1"
    messages = [r.getMessage() for r in caplog.records if r.name == "streams.app.runtime"]
    assert "summary made" in messages
    assert "summary published" not in messages
    made = next(r for r in caplog.records if r.getMessage() == "summary made")
    assert made.__dict__["outcome"] == "summary" and made.__dict__["job_id"] == job(3).job_id


def test_the_replay_counts_made_summaries_by_outcome(tmp_path: Path) -> None:
    def line(msg: str, **fields: object) -> str:
        return json.dumps({"level": "info", "msg": msg, **fields})

    a, b = tmp_path / "r.log", tmp_path / "r.w2.log"
    a.write_text("\n".join([
        line("summary made", outcome="summary", job_id="j1"),  # its send cut: never published here
        line("summary made", outcome="cached", job_id="j2"),
        line("summary published", outcome="cached", job_id="j2"),
        "not json at all, a traceback line",
    ]) + "\n")  # fmt: skip
    b.write_text("\n".join([
        line("summary dropped: its version is taken", job_id="j1"),
        line("summary made", outcome="summary", job_id="j3"),
        line("summary published", outcome="summary", job_id="j3"),
    ]) + "\n")  # fmt: skip
    # Lines of a worker before the count: one model call per summary the model made.
    assert _outcomes([a, b]) == {"summary": 2, "cached": 1, "model_calls": 2}


def test_the_replay_counts_every_model_call_a_summary_took(tmp_path: Path) -> None:
    """A summary may take more than one call (an empty answer asked again, a ``max_summary_length``
    rewrite); one a callback answered took none; a cache hit none."""
    log = tmp_path / "r.log"
    log.write_text("\n".join(json.dumps({"msg": "summary made", **f}) for f in (
        {"outcome": "summary", "model_calls": 2},
        {"outcome": "summary", "model_calls": 0},
        {"outcome": "summary", "model_calls": 1},
        {"outcome": "cached", "model_calls": 0},
    )) + "\n")  # fmt: skip
    assert _outcomes([log]) == {"summary": 3, "cached": 1, "model_calls": 3}


async def test_the_made_line_names_the_model_calls_of_the_summary(caplog: pytest.LogCaptureFixture) -> None:
    """An empty first answer is asked again: the summary took two calls, and its line says so."""
    runtime = memory_runtime(ScriptedModel("", "摘要 M1", context_window=100_000))
    sent: list[bytes] = []

    async def send(topic: str, key: bytes, value: bytes, partition: int, headers: object) -> None:
        sent.append(value)

    runtime.send = send
    caplog.set_level(logging.INFO, logger="streams.app.runtime")
    await runtime.run_job(job(3), Coordinates("jobs", 0, 0), b"k", None)
    assert json.loads(sent[0])["summary"] == "摘要 M1"
    made = next(r for r in caplog.records if r.getMessage() == "summary made")
    assert made.__dict__["outcome"] == "summary" and made.__dict__["model_calls"] == 2


def test_the_replay_counts_the_calls_of_jobs_it_gave_up(tmp_path: Path) -> None:
    log = tmp_path / "r.log"
    log.write_text("\n".join(json.dumps({"msg": m, **f}) for m, f in (
        ("summary made", {"outcome": "summary", "model_calls": 3}),
        ("summary job given up", {"error_class": "RetryableError", "model_calls": 2}),
        ("summary job failed", {"error_class": "RetryableError"}),
    )) + "\n")  # fmt: skip
    assert _outcomes([log]) == {"summary": 1, "model_calls": 5}
