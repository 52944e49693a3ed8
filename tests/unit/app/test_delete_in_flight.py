"""``delete_session`` while a job is in flight: the deleted history does not come back.

The job decided before the deletion is answered after it (its summary of the deleted events
reaches the track side and the summarize side's ledger); the summaries made for the events
after the deletion must not carry it forward. The oracle: a marker in every event and a model
that answers with every marker it was sent (the previous summary's and the delta's).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from projections.boundary import Deletion, outlived_by_deletion
from schemas import DeleteSession, SessionEvent, SessionSummary, SummarizeSync, SummaryJob, SummaryReply
from schemas.settings import Settings
from streams.app.coordinates import Coordinates
from streams.app.decoding import decode_event_record
from streams.app.heads import head_of
from streams.app.inprocess import _Ledger, _Log
from streams.app.ledger import summary_key
from streams.app.summarize import SummarizeHandler
from streams.app.track import TrackHandler
from streams.rules.policy import policies_from_settings
from streams.summarizer import build_summarizer
from tests.unit.summarizer.helpers import EchoModel

T0 = datetime(2026, 4, 1, tzinfo=UTC)
MARKER = re.compile(r"\bM(\d+)\b")


class Pipeline:
    """The track and summarize use cases over one partition, jobs answered when the test says."""

    def __init__(self) -> None:
        settings = Settings.model_validate({"summary": {"event_threshold": 2}})
        summarizer = build_summarizer(settings, model=EchoModel(context_window=128_000))  # type: ignore[arg-type]
        self.track = TrackHandler(policies_from_settings(settings.summary, settings.llm.model))
        self.ledger = _Ledger()
        self.log = _Log()
        self.summarize = SummarizeHandler(self.ledger, self.log, lambda app: summarizer, None)
        self.store: dict[str, object] = {}
        self.offset = 0
        self.answers = 0
        self.queue: list[SummaryJob] = []
        self.summaries: list[SessionSummary] = []
        self.replies: list[SessionSummary] = []
        """The summaries the sync requests were answered with."""

    def send(self, record: SessionEvent | DeleteSession | SummarizeSync) -> None:
        value = record.model_dump_json().encode()
        key = record.session_key.kafka_key()
        self.log.add(0, key, self.offset, value)
        out = self.track.on_record(
            decode_event_record(value), Coordinates("events", 0, self.offset), self.store,  # type: ignore[arg-type]
            key=key, raw=value, log_time=T0 + timedelta(seconds=self.offset),
        )  # fmt: skip
        self.offset += 1
        self.queue += out.jobs

    async def answer_all(self) -> None:
        while self.queue:
            result = await self.summarize.handle(self.queue.pop(0), 0)
            record = result.record
            if isinstance(record, SessionSummary):
                self.ledger.heads[summary_key(record)] = head_of(record, result.events_offset)
                self.summaries.append(record)
            if record is not None and record.reply_to is not None:
                self.replies.append(record.summary if isinstance(record, SummaryReply) else record)  # type: ignore[arg-type]
            if record is not None:
                self.track.on_summary_record(record, self.store, self.answers)  # type: ignore[arg-type]
                self.answers += 1


def event(n: int, marker: int | None = None) -> SessionEvent:
    """Event ``n`` (stamped ``T0 + n`` s) carrying marker ``M<marker>`` (default: ``n``)."""
    role = "user" if n % 2 == 0 else "assistant"
    marker = n if marker is None else marker
    return SessionEvent(
        app_name="app", user_id="u", session_id="s", event_id=f"e{n}", timestamp=T0 + timedelta(seconds=n),
        request_id=f"r{n // 2}", author="user" if role == "user" else "agent",
        message={"role": role, "content": f"{'我的地址是' if role == 'user' else '收到'} M{marker}"},
    )  # fmt: skip


def deletion(at: int) -> DeleteSession:
    return DeleteSession(app_name="app", user_id="u", session_id="s", command_id="d1",
                         created_at=T0 + timedelta(seconds=at))  # fmt: skip


@pytest.mark.parametrize("answered", ["after the deletion", "after the later events"])
async def test_a_job_in_flight_at_a_deletion_does_not_bring_the_deleted_history_back(answered: str) -> None:
    pipe = Pipeline()
    for n in range(4):
        pipe.send(event(n))
    assert pipe.queue, "a job is in flight when the session is deleted"
    pipe.send(deletion(50))
    if answered == "after the deletion":
        await pipe.answer_all()
    for n in range(100, 106):
        pipe.send(event(n))
    await pipe.answer_all()
    after = [s for s in pipe.summaries if s.boundary.last_event_id in {f"e{n}" for n in range(100, 106)}]
    assert after, [s.boundary.last_event_id for s in pipe.summaries]
    for s in after:
        assert not [m for m in MARKER.findall(s.summary) if int(m) < 100], s.summary
    last = MARKER.findall(after[-1].summary)
    upto = int(after[-1].boundary.last_event_id[1:])
    assert {str(n) for n in range(100, upto + 1)} <= set(last), last
    versions = [s.version for s in pipe.summaries]
    assert versions == sorted(set(versions)), versions  # versions keep growing through the deletion


def test_a_summary_of_the_events_before_a_deletion_is_stale_whenever_it_was_made() -> None:
    deletion = Deletion(T0 + timedelta(seconds=50), offset=40)
    made_after = T0 + timedelta(seconds=60)
    assert outlived_by_deletion(made_after, 39, deletion)  # a job in flight at the deletion, answered after it
    # The log decides when both offsets are known, whatever the clocks say (the deleter's may run ahead).
    assert not outlived_by_deletion(T0 + timedelta(seconds=40), 45, deletion)
    assert outlived_by_deletion(T0 + timedelta(seconds=40), None, deletion)  # no header: made by the deletion
    assert not outlived_by_deletion(made_after, 41, deletion)  # the events after it
    assert not outlived_by_deletion(made_after, None, deletion)  # no header (an older worker): its time decides
    assert not outlived_by_deletion(made_after, 39, Deletion(T0 + timedelta(seconds=50)))  # an older marker
    assert not outlived_by_deletion(made_after, 39, None)


def markers(summary: SessionSummary) -> set[int]:
    return {int(m) for m in MARKER.findall(summary.summary)}


@pytest.mark.parametrize("ids", ["the same ids", "new ids"])
async def test_history_re_imported_after_a_deletion_with_its_timestamps_is_summarized(ids: str) -> None:
    """Published again after the deletion (original timestamps, new text), while the job decided
    before it is answered: every re-imported event reaches a summary, and a sync request is
    answered with the re-imported history, never the deleted one."""
    pipe = Pipeline()
    for n in range(4):
        pipe.send(event(n))
    assert pipe.queue, "a job is in flight when the session is deleted"
    pipe.send(deletion(50))

    def again(n: int) -> SessionEvent:
        e = event(n, marker=100 + n)
        return e if ids == "the same ids" else e.model_copy(update={"event_id": f"x{n}"})

    for n in range(3):
        pipe.send(again(n))
    await pipe.answer_all()  # the deleted history's summary comes back after the events since
    pipe.send(again(3))
    await pipe.answer_all()
    pipe.send(SummarizeSync(app_name="app", user_id="u", session_id="s", command_id="c", reply_to="r", force=True))
    await pipe.answer_all()
    (reply,) = pipe.replies
    assert markers(reply) == {100, 101, 102, 103}, reply.summary
    last = max(pipe.summaries, key=lambda s: s.version)
    assert markers(last) == {100, 101, 102, 103}, last.summary


async def test_a_sync_request_aimed_at_the_deleted_boundary_is_not_answered_with_the_deleted_history() -> None:
    """The event at the deleted summary's boundary is published again (same id and timestamp): a
    forced sync request's job aims at it, and the deleted summary's boundary seems to cover it."""
    pipe = Pipeline()
    for n in range(4):
        pipe.send(event(n))
    (job,) = pipe.queue
    target = int((job.upto.last_event_id or "")[1:])
    pipe.send(deletion(50))
    await pipe.answer_all()
    pipe.send(event(target, marker=100 + target))
    pipe.send(SummarizeSync(app_name="app", user_id="u", session_id="s", command_id="c", reply_to="r", force=True))
    await pipe.answer_all()
    (reply,) = pipe.replies
    assert markers(reply) == {100 + target}, reply.summary
