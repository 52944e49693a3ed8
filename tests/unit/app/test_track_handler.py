"""The track use case with a dict as the table: no broker."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from schemas import (
    DeleteSession,
    SessionEvent,
    SessionSummary,
    Summarize,
    SummarizeSync,
    SummaryBoundary,
    SummaryFailure,
    SummaryJob,
    SummaryReply,
    SummaryReport,
    TriggerReport,
)
from streams.app.coordinates import Coordinates
from streams.app.decoding import Rejected, decode_event_record
from streams.app.sweep import sweep_commands
from streams.app.track import TrackHandler
from streams.app.tracked import TrackedKey, table_key
from streams.client import is_nothing_to_summarize
from streams.rules.checks import EventThreshold
from streams.rules.policy import PolicySet, SummaryPolicy

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def event(n: int, role: str = "assistant", **kw: Any) -> SessionEvent:
    return SessionEvent.model_validate({
        "app_name": "a", "user_id": "u", "session_id": "s", "event_id": f"e{n}",
        "timestamp": (T0 + timedelta(seconds=n)).isoformat(), "request_id": kw.pop("request_id", "r1"),
        "author": "user" if role == "user" else "bot", "message": {"role": role, "content": f"text number {n}"}, **kw,
    })  # fmt: skip


def handler(threshold: int = 2, **kw: Any) -> TrackHandler:
    return TrackHandler(PolicySet(SummaryPolicy(checks=(EventThreshold(threshold),))), **kw)


def feed(h: TrackHandler, table: dict[str, TrackedKey], events: list[SessionEvent], start: int = 0) -> list[Any]:
    jobs = []
    for i, e in enumerate(events):
        jobs += h.on_record(e, Coordinates("ev", 1, start + i), table).jobs
    return jobs


def test_job_fires_past_the_threshold_with_offsets_and_in_flight_blocks_the_next() -> None:
    table: dict[str, TrackedKey] = {}
    h = handler()
    jobs = feed(h, table, [event(1, "user"), event(2), event(3), event(4)], start=10)
    assert len(jobs) == 1
    job = jobs[0]
    assert job.upto.last_event_id == "e3" and job.upto.offset == 12 and job.events_from_offset == 10
    assert table[table_key("a", "u", "s", "")].state.in_flight is not None


def test_summary_releases_the_key_and_failure_releases_it_too() -> None:
    table: dict[str, TrackedKey] = {}
    h = handler()
    job = feed(h, table, [event(1, "user"), event(2), event(3)])[0]
    summary = SessionSummary(
        app_name="a", user_id="u", session_id="s", summary="x", version=1,
        boundary=SummaryBoundary(cutoff_at=job.upto.cutoff_at, last_event_id="e3"), model="m", prompt_version="p",
        created_at=T0, report=SummaryReport(trigger=TriggerReport(name="event_threshold")), job_id=job.job_id,
    )  # fmt: skip
    h.on_summary_record(summary, table)
    state = table[table_key("a", "u", "s", "")].state
    assert state.in_flight is None and state.version == 1 and not state.pending
    more = feed(h, table, [event(4, "user"), event(5), event(6)], start=3)
    assert more and more[0].from_version == 1 and more[0].previous_boundary is not None


def test_invalid_records_become_dead_letters_with_coordinates() -> None:
    out = handler().on_record(decode_event_record(b"[1]", 100), Coordinates("ev", 0, 7), {}, key=b"k")
    assert out.dead_letter is not None and out.dead_letter.source_offset == 7
    assert decode_event_record(b"x" * 101, 100) == Rejected(b"x" * 101, "OversizedRecord", ANY_REASON)


class _Any:
    def __eq__(self, other: object) -> bool:
        return True


ANY_REASON: Any = _Any()


def test_sync_command_with_nothing_to_summarize_is_answered_with_a_failure() -> None:
    cmd = SummarizeSync(app_name="a", user_id="u", session_id="s", command_id="c", reply_to="r")
    out = handler().on_record(cmd, Coordinates("ev", 0, 0), {}, log_time=T0)
    (reply,) = out.replies
    assert not out.jobs and reply.reply_to == "r" and reply.error_class == "NothingToSummarize"
    assert "empty_delta" in reply.reason


def branch_events() -> list[SessionEvent]:
    return [event(1, "user", filter_key="a/b"), event(2, filter_key="a/b"), event(3, filter_key="a/b")]


def sync(filter_key: str, **kw: Any) -> SummarizeSync:
    return SummarizeSync(app_name="a", user_id="u", session_id="s", command_id="c", reply_to="r",
                         filter_key=filter_key, **kw)  # fmt: skip


def test_sync_command_on_a_branch_emits_one_job_for_that_key() -> None:
    table: dict[str, TrackedKey] = {}
    h = handler(threshold=100)
    feed(h, table, branch_events())
    out = h.on_record(sync("a/b", force=True), Coordinates("ev", 1, 9), table, log_time=T0)
    assert [(j.filter_key, j.reply_to) for j in out.jobs] == [("a/b", "r")] and not out.replies
    assert table[table_key("a", "u", "s", "")].state.in_flight is None


def test_sync_command_on_a_refused_key_is_answered_naming_the_allowlist() -> None:
    h = TrackHandler(PolicySet(SummaryPolicy(checks=(EventThreshold(100),), allowlist=frozenset({"a/other"}))))
    table: dict[str, TrackedKey] = {}
    feed(h, table, branch_events())
    full = table_key("a", "u", "s", "")
    out = h.on_record(sync("a/b", force=True), Coordinates("ev", 1, 9), table, log_time=T0)
    (reply,) = out.replies
    assert not out.jobs and reply.error_class == "NothingToSummarize" and reply.filter_key == "a/b"
    assert "allowlist" in reply.reason and "'a/b'" in reply.reason
    assert table[full].state.in_flight is None  # the full session is not summarized instead


def test_unforced_sync_command_below_the_thresholds_is_nothing_to_summarize() -> None:
    table: dict[str, TrackedKey] = {}
    h = handler(threshold=100)
    feed(h, table, [event(1, "user"), event(2)])
    out = h.on_record(sync("", force=False), Coordinates("ev", 1, 9), table, log_time=T0)
    (reply,) = out.replies
    assert not out.jobs and reply.error_class == "NothingToSummarize" and "checks_failed" in reply.reason


def test_delete_keeps_versions_and_forgets_the_pending_events() -> None:
    table: dict[str, TrackedKey] = {}
    h = handler(threshold=100)
    feed(h, table, [event(1, "user"), event(2)])
    h.on_record(
        DeleteSession(app_name="a", user_id="u", session_id="s", command_id="d"), Coordinates("ev", 1, 9), table
    )
    state = table[table_key("a", "u", "s", "")].state
    assert not state.pending and state.version == 0


def test_replay_mode_decisions_do_not_wait_for_summaries() -> None:
    table: dict[str, TrackedKey] = {}
    jobs = feed(handler(optimistic=True), table, [event(i, "user" if i % 2 else "assistant") for i in range(1, 10)])
    assert [j.from_version for j in jobs] == list(range(len(jobs))) and len(jobs) >= 2


def test_sweep_pokes_idle_keys_and_timed_out_jobs() -> None:
    table: dict[str, TrackedKey] = {}
    h = handler(threshold=100, wall_clock=lambda: 1000.0)
    feed(h, table, [event(1, "user"), event(2)])
    idle = sweep_commands(table.values(), now=T0 + timedelta(hours=1), idle_after_s=60, job_timeout_s=120)
    assert [c.model_extra["origin"] for _, _, c in idle] == ["idle_sweep"]
    assert not sweep_commands(table.values(), now=T0 + timedelta(seconds=30), idle_after_s=60, job_timeout_s=120)
    h2 = handler(threshold=1, wall_clock=lambda: T0.timestamp())
    table2: dict[str, TrackedKey] = {}
    feed(h2, table2, [event(1, "user"), event(2)])
    late = sweep_commands(table2.values(), now=T0 + timedelta(seconds=500), idle_after_s=None, job_timeout_s=120)
    assert [c.model_extra["origin"] for _, _, c in late] == ["retry"]
    out = h2.on_record(late[0][2], Coordinates("ev", 1, 5), table2, log_time=T0)
    assert out.jobs and out.jobs[0].origin == "retry"


def test_a_sweep_retry_re_emits_the_same_job_and_moves_no_boundary() -> None:
    # The retry poke is in the log: a replay, whose job was long answered, must decide alike.
    h = handler(threshold=1, wall_clock=lambda: T0.timestamp())
    table: dict[str, TrackedKey] = {}
    (job,) = feed(h, table, [event(1, "user"), event(2)])
    feed(h, table, [event(3, "user")], start=2)  # not a model output: nothing decided
    key = table_key("a", "u", "s", "")
    before = table[key].state
    late = sweep_commands(table.values(), now=T0 + timedelta(seconds=500), idle_after_s=None, job_timeout_s=120)
    out = h.on_record(late[0][2], Coordinates("ev", 1, 5), table, log_time=T0)
    (again,) = out.jobs
    assert (again.job_id, again.upto.last_event_id, again.attempt) == (job.job_id, "e2", 1)
    after = table[key].state
    assert after.decided_id == before.decided_id == "e2" and after.counters == before.counters
    assert after.in_flight is not None and after.in_flight.attempt == 1 and not after.queued


def test_a_job_in_flight_does_not_hold_the_next_job_back() -> None:
    # Jobs queue per key; with summaries late the jobs are those of a run whose summaries came at once.
    events = [event(i, "user" if i % 3 == 1 else "assistant") for i in range(1, 13)]
    slow_table: dict[str, TrackedKey] = {}
    slow = feed(handler(threshold=2), slow_table, events)
    state = slow_table[table_key("a", "u", "s", "")].state
    assert len(slow) >= 3 and len(state.unanswered) == len(slow)
    assert [j.upto.last_event_id for j in slow] == [
        j.upto.last_event_id for j in feed(handler(threshold=2, optimistic=True), {}, events)
    ]


def test_a_retried_job_carries_the_request_context_it_was_emitted_with() -> None:
    h = handler(threshold=1, wall_clock=lambda: T0.timestamp())
    table: dict[str, TrackedKey] = {}
    gold = {"tenant_tier": "gold"}
    jobs = feed(h, table, [event(1, "user", context=gold), event(2, context=gold)])
    assert [j.context for j in jobs] == [{"tenant_tier": "gold"}]
    value = table[table_key("a", "u", "s", "")]
    assert TrackedKey.from_bytes(value.to_bytes()) == value  # the context survives the changelog
    retry = sweep_commands(table.values(), now=T0 + timedelta(seconds=500), idle_after_s=None, job_timeout_s=120)
    assert [c.context for _, _, c in retry] == [{"tenant_tier": "gold"}]
    out = h.on_record(retry[0][2], Coordinates("ev", 1, 5), table, log_time=T0)
    assert [(j.origin, j.context) for j in out.jobs] == [("retry", {"tenant_tier": "gold"})]


def test_the_in_flight_row_keeps_the_offset_its_job_reads_to_and_older_rows_still_read() -> None:
    table: dict[str, TrackedKey] = {}
    jobs = feed(handler(threshold=1), table, [event(1, "user"), event(2)], start=40)
    value = table[table_key("a", "u", "s", "")]
    row = json.loads(value.to_bytes())
    assert row[4][10] == [jobs[0].job_id, "e2", row[4][10][2], 0, None, 41] and jobs[0].upto.offset == 41
    row[4][10] = row[4][10][:4]  # as a build that kept neither contexts nor offsets wrote it
    older = TrackedKey.from_bytes(json.dumps(row))
    assert older.state.in_flight is not None and older.state.in_flight.upto_offset is None


def test_table_values_round_trip() -> None:
    table: dict[str, TrackedKey] = {}
    feed(handler(), table, [event(1, "user"), event(2), event(3)])
    for value in table.values():
        assert TrackedKey.from_bytes(value.to_bytes()) == value


def test_event_fast_path_decodes_like_the_full_parser() -> None:
    from schemas import Summarize, parse_event_record

    ev = event(1).model_dump_json().encode()
    no_type = ev.replace(b'"type":"event",', b"")
    cmd = Summarize(app_name="a", user_id="u", session_id="s", command_id="c").model_dump_json().encode()
    for raw in (ev, no_type, cmd):
        assert decode_event_record(raw, 1 << 20) == parse_event_record(raw)
    bad_schema = ev.replace(b'"session_id":"s"', b'"session_id":7')
    for raw, error_class in ((b"{not json", "RecordDecodeError"), (b"\xff", "RecordDecodeError"),
                             (bad_schema, "ValidationError")):  # fmt: skip
        rejected = decode_event_record(raw, 1 << 20)
        assert isinstance(rejected, Rejected) and rejected.error_class == error_class


def _given_up(job: SummaryJob, window: int | None = None) -> SummaryFailure:
    return SummaryFailure(app_name="a", user_id="u", session_id="s", job_id=job.job_id,
                          error_class="RetryableError", reason="given up", created_at=T0, gave_up=True,
                          retryable=True, context_window=window)  # fmt: skip


def test_a_given_up_job_cools_its_key_down_and_the_idle_sweep_leaves_it_alone() -> None:
    table: dict[str, TrackedKey] = {}
    h = TrackHandler(PolicySet(SummaryPolicy(checks=(EventThreshold(1),), failure_cooldown_s=60)))
    job = feed(h, table, [event(1, "user"), event(2)])[0]
    h.on_summary_record(_given_up(job, window=2048), table)
    state = table[table_key("a", "u", "s", "")].state
    assert state.in_flight is None and state.failed is not None and state.learned_window == 2048
    assert not feed(h, table, [event(n) for n in range(3, 40)], start=3)  # every event within 60 s
    idle = Summarize.model_validate({"app_name": "a", "user_id": "u", "session_id": "s", "command_id": "c1",
                                     "origin": "idle_sweep"})  # fmt: skip
    assert not h.on_record(idle, Coordinates("ev", 1, 50), table, log_time=T0 + timedelta(seconds=30)).jobs
    [retry] = feed(h, table, [event(62)], start=60)  # the half-open retry, budgeted with the learned window
    assert retry.summary_context_window == 2048


def test_a_sync_request_during_the_rounds_job_joins_it_and_leaves_the_key_as_it_was() -> None:
    """The join job goes out with the jobs; the key's queue, its state and the sweep's clock stay."""
    clock = [T0.timestamp()]
    h = handler(threshold=1, wall_clock=lambda: clock[0])
    table: dict[str, TrackedKey] = {}
    (job,) = feed(h, table, [event(1, "user"), event(2)])
    key = table_key("a", "u", "s", "")
    before = table[key]
    clock[0] += 300  # the job is old: a new emission would restart its timeout
    out = h.on_record(sync("", force=False), Coordinates("ev", 1, 9), table, log_time=T0 + timedelta(seconds=3))
    (join,) = out.jobs
    assert not out.replies and join.origin == "join" and join.reply_to == "r"
    assert join.upto.last_event_id == job.upto.last_event_id and join.job_id != job.job_id
    assert table[key].emitted_wall == before.emitted_wall and table[key].state.to_bytes() == before.state.to_bytes()
    late = sweep_commands(table.values(), now=T0 + timedelta(seconds=500), idle_after_s=None, job_timeout_s=120)
    assert [c.model_extra["origin"] for _, _, c in late] == ["retry"]  # the real job is still re-emitted


def test_a_reply_on_the_summaries_topic_changes_no_state() -> None:
    h = handler()
    table: dict[str, TrackedKey] = {}
    (job,) = feed(h, table, [event(1, "user"), event(2), event(3)])
    key = table_key("a", "u", "s", "")
    before = table[key].state.to_bytes()
    named = SessionSummary(
        app_name="a", user_id="u", session_id="s", summary="x", version=1,
        boundary=SummaryBoundary(cutoff_at=job.upto.cutoff_at, last_event_id="e3"), model="m", prompt_version="p",
        created_at=T0, report=SummaryReport(trigger=TriggerReport(name="event_threshold")), job_id=job.job_id,
    )  # fmt: skip
    answer = SummaryReply(
        app_name="a", user_id="u", session_id="s", job_id="join", reply_to="r", summary=named, created_at=T0
    )
    h.on_summary_record(answer, table)
    assert table[key].state.to_bytes() == before


def test_a_sync_request_after_its_keys_job_was_given_up_is_answered_with_the_failure_not_nothing() -> None:
    """The request came after the failure came back (no job in flight to join, no summary to return).

    A summary was due and its job failed: answering ``NothingToSummarize`` made the client return
    ``None`` as for a key with nothing due (test_pipeline_sync's joined-failure test, when the
    failure won the race). Forced, the request bypasses the cooldown and runs a job.
    """
    h = TrackHandler(PolicySet(SummaryPolicy(checks=(EventThreshold(1),), failure_cooldown_s=60)))
    table: dict[str, TrackedKey] = {}
    (job,) = feed(h, table, [event(1, "user"), event(2)])
    h.on_summary_record(_given_up(job), table)
    out = h.on_record(sync("", force=False), Coordinates("ev", 1, 9), table, log_time=T0 + timedelta(seconds=3))
    (answer,) = out.replies
    assert not out.jobs and answer.error_class == "KeyCoolingDown" and answer.reply_to == "r"
    assert not is_nothing_to_summarize(answer)
    assert "1 failure(s) in a row" in answer.reason and "2026-01-01T00:01:02" in answer.reason, answer.reason
    (forced,) = h.on_record(sync("", force=True), Coordinates("ev", 1, 10), table).jobs
    assert forced.origin != "join" and forced.upto.last_event_id == "e2"


def test_a_sync_request_on_a_key_with_nothing_due_still_says_nothing_to_summarize() -> None:
    h = handler(threshold=100)
    table: dict[str, TrackedKey] = {}
    feed(h, table, [event(1, "user"), event(2)])
    (answer,) = h.on_record(sync("", force=False), Coordinates("ev", 1, 9), table).replies
    assert answer.error_class == "NothingToSummarize" and is_nothing_to_summarize(answer)


@pytest.mark.parametrize("emitted_by", ["command", "sweep_retry"])
def test_a_given_up_jobs_cooldown_runs_in_event_time_however_the_job_was_emitted(emitted_by: str) -> None:
    # The job is emitted by a summarize command (and, in one case, re-emitted by a sweep's retry
    # poke), records logged at the wall clock's time — here a year after the session's events, as
    # when a backlog of old events is summarized; then it is given up. The cooldown runs in event
    # time from the session's latest event: the first event past it gets the half-open retry. Before,
    # the record's wall-clock time anchored the cooldown, and no event of the session got a job until
    # its event time passed that.
    table: dict[str, TrackedKey] = {}
    h = TrackHandler(PolicySet(SummaryPolicy(checks=(EventThreshold(3),), failure_cooldown_s=60)))
    assert not feed(h, table, [event(1, "user"), event(2)])
    later = T0 + timedelta(days=365)
    command = Summarize.model_validate({"app_name": "a", "user_id": "u", "session_id": "s", "command_id": "c1",
                                        "force": True})  # fmt: skip
    [job] = h.on_record(command, Coordinates("ev", 1, 5), table, log_time=later).jobs
    if emitted_by == "sweep_retry":
        poke = Summarize.model_validate({"app_name": "a", "user_id": "u", "session_id": "s", "command_id": "c2",
                                         "origin": "retry"})  # fmt: skip
        [again] = h.on_record(poke, Coordinates("ev", 1, 6), table, log_time=later + timedelta(minutes=5)).jobs
        assert again.job_id == job.job_id and again.origin == "retry"
    h.on_summary_record(_given_up(job), table)
    assert not feed(h, table, [event(30)], start=7)  # within 60 s of e2 in event time
    [retry] = feed(h, table, [event(70)], start=8)  # past it: the half-open retry
    # ... and it covers every event from the first (offsets 0..8): none is left out of a summary input.
    assert retry.upto.last_event_id == "e70" and retry.upto.offset == 8
    assert retry.previous_boundary is None and retry.from_version == 0 and retry.events_from_offset == 0


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"message": "hi"}, "message: expected a JSON object, got str"),
        ({"message": None}, "message: expected a JSON object, got NoneType"),
        (
            {"message": {"role": "user", "content": "x", "tool_calls": [3]}},
            "message.tool_calls.0: expected a JSON object, got int",
        ),
        ({"error": ["boom"]}, "error: expected a JSON object, got list"),
        ({"session_id": 7}, "session_id: Input should be a valid string"),
    ],
)
def test_a_rejected_event_says_which_field_is_wrong_and_never_quotes_its_value(
    fields: dict[str, Any], says: str
) -> None:
    record = {"app_name": "a", "user_id": "u", "session_id": "s", "event_id": "e1", "author": "user",
              "timestamp": "2026-05-02T09:00:00Z", "message": {"role": "user", "content": "x"}, **fields}  # fmt: skip
    rejected = decode_event_record(json.dumps(record).encode(), 1 << 20)
    assert isinstance(rejected, Rejected) and rejected.error_class == "ValidationError"
    assert says in rejected.reason, rejected.reason
    assert "hi" not in rejected.reason and "boom" not in rejected.reason


def test_a_validator_failing_with_another_error_than_value_error_gives_a_dead_letter_not_a_stop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``decode_event_record`` never raises: a record that broke a validator some other way (an
    OverflowError converting a year-1 timestamp to UTC did) used to stop the worker at every restart."""
    import streams.app.decoding as decoding

    def overflow(raw: bytes) -> Any:
        raise OverflowError("date value out of range")

    monkeypatch.setattr(decoding, "parse_event_record", overflow)
    rejected = decode_event_record(b'{"type": "summarize"}', 1 << 20)
    assert isinstance(rejected, Rejected) and rejected.error_class == "OverflowError"
    out = handler().on_record(rejected, Coordinates("ev", 1, 9), {}, key=b"k")
    assert out.dead_letter is not None and out.dead_letter.error_class == "OverflowError"
