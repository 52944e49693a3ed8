"""The client's summaries reader skips malformed records instead of ending the stream."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from schemas import SessionKey, SessionSummary, SummaryBoundary
from schemas.summaries import SummaryReport, TriggerReport
from streams.client import _first_reply, _records

SESSION = SessionKey("app", "u1", "s1")
T = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class Msg:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


class FakeConsumer:
    def __init__(self, msgs: list[Msg]) -> None:
        self.msgs = msgs

    async def __aiter__(self) -> AsyncIterator[Msg]:  # type: ignore[misc]
        for m in self.msgs:
            yield m


def summary(reply_to: str | None = None) -> bytes:
    return SessionSummary(
        app_name="app", user_id="u1", session_id="s1", summary="text", version=1,
        boundary=SummaryBoundary(cutoff_at=T, last_event_id="e1"), model="m", prompt_version="p",
        created_at=T, job_id="j", reply_to=reply_to, report=SummaryReport(trigger=TriggerReport(name="force")),
    ).model_dump_json().encode()  # fmt: skip


BAD = [b"not json", b"[1, 2]", b'{"type": "summary", "version": "x"}', b"\xff\xfe"]


async def test_malformed_records_are_skipped_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    key = SESSION.kafka_key()
    msgs = [Msg("sum", 0, i, key, v) for i, v in enumerate(BAD)] + [Msg("sum", 0, 9, key, summary())]
    caplog.set_level(logging.WARNING, logger="streams.client")
    got = [r async for r in _records(FakeConsumer(msgs), SESSION, True)]  # type: ignore[arg-type]
    assert len(got) == 1 and got[0].summary == "text"
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [(r.__dict__["partition"], r.__dict__["offset"]) for r in warned] == [(0, i) for i in range(len(BAD))]
    assert all(r.__dict__["topic"] == "sum" for r in warned)


async def test_a_malformed_record_does_not_end_a_sync_request() -> None:
    key = SESSION.kafka_key()
    msgs: list[Any] = [Msg("sum", 1, 0, key, b"{broken"), Msg("sum", 1, 1, key, summary("corr"))]
    reply = await _first_reply(_records(FakeConsumer(msgs), SESSION, True), "corr")  # type: ignore[arg-type]
    assert reply.reply_to == "corr"
