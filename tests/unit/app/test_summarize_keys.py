"""The summarize handler reads a job's delta by the session's own record key, then checks the ids.

An events partition where records carry various keys: a job's delta holds
exactly its session's events (markers), whatever the key layout, and not the
events of another session that shares the key (same session id under another
user or app, or a key shared by every session of a user).
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

import pytest

from schemas import SessionEvent, SessionSummary, SummaryJob
from schemas.settings import Settings
from streams.app.event_log import RawEvent
from streams.app.summarize import SummarizeHandler
from streams.summarizer import SummarizerLike, build_summarizer
from tests.unit.app.test_summarize_handler import MemoryLedger
from tests.unit.summarizer.helpers import ScriptedModel

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def ev(app: str, user: str, session: str, n: int) -> SessionEvent:
    return SessionEvent.model_validate({
        "app_name": app, "user_id": user, "session_id": session, "event_id": f"{app}-{user}-{session}-{n}",
        "timestamp": T0.replace(second=n).isoformat(), "author": "user" if n % 2 == 0 else "bot",
        "message": {"role": "user" if n % 2 == 0 else "assistant", "content": f"MARK-{app}-{user}-{session}-{n}"},
    })  # fmt: skip


class KeyedLog:
    """One events partition of ``(key, event)`` records at offsets 0, 1, ...; ``read`` filters by key."""

    def __init__(self, records: list[tuple[bytes, SessionEvent]]) -> None:
        self.records = [(k, RawEvent(i, e.model_dump_json().encode())) for i, (k, e) in enumerate(records)]
        self.keys: list[bytes] = []

    async def read(self, partition: int, start: int, end: int, key: bytes) -> list[RawEvent]:
        self.keys.append(key)
        return [r for k, r in self.records if k == key and start <= r.offset <= end]


def job_for(session: tuple[str, str, str], upto: SessionEvent, offset: int, key: bytes | None) -> SummaryJob:
    app, user, sid = session
    data: dict[str, Any] = {
        "job_id": f"j-{sid}", "app_name": app, "user_id": user, "session_id": sid,
        "upto": {"last_event_id": upto.event_id, "cutoff_at": upto.timestamp.isoformat(), "offset": offset},
        "trigger": {"name": "event_threshold"}, "created_at": T0.isoformat(), "events_from_offset": 0,
    }  # fmt: skip
    if key is not None:
        data["events_key_b64"] = base64.b64encode(key).decode()
    return SummaryJob.model_validate(data)


async def summarize(log: KeyedLog, job: SummaryJob) -> str:
    model = ScriptedModel(default="ok", context_window=100_000)
    summarizer = build_summarizer(Settings(), app_name=job.app_name, model=model)

    def summarizer_for(app: str) -> SummarizerLike:
        return summarizer

    result = await SummarizeHandler(MemoryLedger(), log, summarizer_for).handle(job, 0)
    assert result.outcome == "summary" and isinstance(result.record, SessionSummary), result
    assert result.record.boundary.last_event_id == job.upto.last_event_id
    return str(model.requests[0].messages)


@pytest.mark.parametrize("key", [b"app:u1:s1", b"s1", b"\x00\x01opaque\xff"], ids=["colons", "bare", "bytes"])
async def test_the_delta_is_read_by_the_jobs_key_and_holds_every_event(key: bytes) -> None:
    mine = [ev("app", "u1", "s1", n) for n in range(4)]
    log = KeyedLog([(key, e) for e in mine])
    prompt = await summarize(log, job_for(("app", "u1", "s1"), mine[-1], 3, key))
    assert log.keys == [key]
    assert all(f"MARK-app-u1-s1-{n}" in prompt for n in range(4))


async def test_records_of_other_sessions_sharing_the_key_are_left_out() -> None:
    """Key = the bare session id, which other users and apps use too (or a user-wide key)."""
    mine = [ev("app", "u1", "s1", n) for n in range(4)]
    others = [ev("app", "u2", "s1", 10), ev("other", "u1", "s1", 11), ev("app", "u1", "s2", 12)]
    log = KeyedLog([(b"s1", e) for e in [mine[0], others[0], mine[1], others[1], mine[2], others[2], mine[3]]])
    prompt = await summarize(log, job_for(("app", "u1", "s1"), mine[-1], 6, b"s1"))
    assert all(f"MARK-app-u1-s1-{n}" in prompt for n in range(4))
    assert "MARK-app-u2" not in prompt and "MARK-other" not in prompt and "s2-12" not in prompt


async def test_a_job_without_a_key_reads_by_the_canonical_key() -> None:
    mine = [ev("app", "u1", "s1", n) for n in range(2)]
    log = KeyedLog([(b"app/u1/s1", e) for e in mine])
    await summarize(log, job_for(("app", "u1", "s1"), mine[-1], 1, None))
    assert log.keys == [b"app/u1/s1"]
