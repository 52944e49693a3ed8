"""A summary of deleted history, answered after the ``delete_session``, moves no boundary.

A job in flight at the deletion is answered after it: its summary's version is above the reset
state's (a deletion keeps the version). Applied, its boundary (the deleted events') would cut the
events published since that are stamped at or before its cutoff (history re-imported with its
original timestamps) out of the pending index, and a ``summarize_sync`` would join it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from schemas import (
    DeleteSession,
    SessionEvent,
    SessionSummary,
    SummaryBoundary,
    SummaryFailure,
    SummaryJob,
    SummaryReport,
    TriggerReport,
)
from streams.app.coordinates import Coordinates
from streams.app.track import TrackHandler
from streams.app.tracked import TrackedKey, table_key
from streams.rules.trigger_state import SessionTriggerState, from_dict, to_dict
from tests.unit.app.test_track_handler import T0, event, handler, sync

KEY = table_key("a", "u", "s", "")


def summary_of(job: SummaryJob, version: int = 1) -> SessionSummary:
    """``job``'s summary as the summarize side makes it (its chain starts at the job's first offset)."""
    return SessionSummary(
        app_name="a", user_id="u", session_id="s", summary="the deleted history", version=version,
        boundary=SummaryBoundary(cutoff_at=job.upto.cutoff_at, last_event_id=job.upto.last_event_id),
        model="m", prompt_version="p", created_at=T0,
        report=SummaryReport(trigger=TriggerReport(name="event_threshold")), job_id=job.job_id,
        chain_from_offset=job.events_from_offset,
    )  # fmt: skip


class Session:
    """One partition's records folded in order (offset = position)."""

    def __init__(self, h: TrackHandler) -> None:
        self.h = h
        self.table: dict[str, TrackedKey] = {}
        self.offset = 0
        self.answers = 0

    def send(self, record: Any) -> list[SummaryJob]:
        out = self.h.on_record(record, Coordinates("ev", 1, self.offset), self.table, log_time=T0)
        self.offset += 1
        self.last_replies = out.replies
        return out.jobs

    def answer(self, summary: SessionSummary) -> None:
        self.h.on_summary_record(summary, self.table, self.answers)
        self.answers += 1

    @property
    def state(self) -> SessionTriggerState:
        return self.table[KEY].state


def reimported(n: int, role: str = "assistant", event_id: str | None = None) -> SessionEvent:
    """Event ``n`` published again after the deletion, with its original timestamp."""
    return event(n, role).model_copy(update={"event_id": event_id or f"x{n}"})


def deleted_then(events: list[SessionEvent]) -> tuple[Session, SummaryJob]:
    """Two events fire a job; the session is deleted with it in flight, then ``events`` are published."""
    s = Session(handler(threshold=1))
    (job,) = s.send(event(1, "user")) + s.send(event(2))
    s.send(DeleteSession(app_name="a", user_id="u", session_id="s", command_id="d"))
    for e in events:
        assert not s.send(e)
    return s, job


def test_events_published_after_a_deletion_still_count_when_the_deleted_history_is_answered() -> None:
    s, job = deleted_then([reimported(1, "user")])
    s.answer(summary_of(job))  # stamped before the events' cutoff: the old boundary cut x1 out
    assert [p.event_id for p in s.state.pending] == ["x1"]
    assert s.state.boundary is None and s.state.version == 1  # the version counts: the next is 2
    jobs = s.send(reimported(2))
    assert [(j.upto.last_event_id, j.from_version, j.previous_boundary) for j in jobs] == [("x2", 1, None)]


def test_a_sync_after_a_deletion_does_not_join_the_deleted_history() -> None:
    s, job = deleted_then([])
    s.answer(summary_of(job))
    assert not s.send(sync(""))
    (reply,) = s.last_replies
    assert reply.error_class == "NothingToSummarize"


def test_a_summary_of_deleted_history_answers_no_job_decided_after_the_deletion() -> None:
    # Re-imported with their ids: the job decided for them has the deleted job's id.
    s, job = deleted_then([reimported(1, "user", "e1")])
    (again,) = s.send(reimported(2, event_id="e2"))
    assert again.job_id == job.job_id and again.events_from_offset == 3
    s.answer(summary_of(job))
    assert s.state.in_flight is not None and s.state.in_flight.job_id == again.job_id
    assert [p.event_id for p in s.state.pending] == ["e1", "e2"] and s.state.boundary is None
    s.answer(summary_of(again, version=2))  # its own answer moves the boundary
    assert s.state.in_flight is None and s.state.boundary_event_id == "e2" and not s.state.pending


def test_a_summary_of_the_history_since_the_deletion_applies() -> None:
    s, _ = deleted_then([reimported(1, "user")])
    (job,) = s.send(reimported(2))
    s.answer(summary_of(job))
    assert s.state.boundary_event_id == "x2" and s.state.version == 1 and s.state.in_flight is None


def test_the_deletion_offset_survives_the_changelog() -> None:
    s, _ = deleted_then([reimported(1, "user")])
    assert s.state.deleted_at == 2
    back = TrackedKey.from_bytes(s.table[KEY].to_bytes())
    assert back.state.deleted_at == 2 and back.state == s.state
    assert from_dict(to_dict(s.state)).deleted_at == 2


def test_a_failure_of_a_job_decided_before_the_deletion_starts_no_cooldown() -> None:
    s, job = deleted_then([])
    failure = SummaryFailure(
        app_name="a", user_id="u", session_id="s", job_id=job.job_id, error_class="X", reason="r",
        created_at=T0 + timedelta(hours=1), gave_up=True, upto_event_id=job.upto.last_event_id,
        events_from_offset=job.events_from_offset,
    )  # fmt: skip
    s.h.on_summary_record(failure, s.table, 0)
    assert s.state.failed is None and s.state.decided_id is None
    # Re-imported history is stamped before the failure: a cooldown anchored there never ended for it.
    jobs = [j for n in range(1, 5) for j in s.send(reimported(n, "user" if n % 2 else "assistant"))]
    assert [j.upto.last_event_id for j in jobs] == ["x2", "x4"]


def test_a_failure_of_a_job_decided_since_the_deletion_still_cools_the_key_down() -> None:
    s, _ = deleted_then([reimported(1, "user")])
    (job,) = s.send(reimported(2))
    failure = SummaryFailure(
        app_name="a", user_id="u", session_id="s", job_id=job.job_id, error_class="X", reason="r",
        created_at=T0, gave_up=True, upto_event_id=job.upto.last_event_id, events_from_offset=job.events_from_offset,
    )  # fmt: skip
    s.h.on_summary_record(failure, s.table, 0)
    assert s.state.failed is not None and s.state.failed.failures == 1 and s.state.in_flight is None
