"""The idle sweep after a key's job is answered: the events that came while it ran are swept.

A job's emission time (``TrackedKey.emitted_wall``, the job timeout's clock) stayed on the key
after its summary or its failure came back. The idle sweep skips a key with an emission time,
so the events that arrived while the job ran — after its target — waited, unsummarized, for an
event that might never come: a session gone quiet kept them out of every summary.
"""

from __future__ import annotations

from datetime import timedelta

from schemas import SessionSummary, SummaryBoundary, SummaryJob, SummaryReport, TriggerReport
from streams.app.coordinates import Coordinates
from streams.app.sweep import sweep_commands
from streams.app.sweep_watch import SweepWatch
from streams.app.track import TrackHandler
from streams.app.tracked import TrackedKey, table_key
from streams.rules.checks import EventThreshold
from streams.rules.policy import PolicySet, SummaryPolicy
from tests.unit.app.test_track_handler import T0, _given_up, event, feed, handler

KEY = table_key("a", "u", "s", "")
LATER = T0 + timedelta(hours=1)


def summary_of(job: SummaryJob) -> SessionSummary:
    return SessionSummary(
        app_name="a", user_id="u", session_id="s", summary="x", version=job.from_version + 1,
        boundary=SummaryBoundary(cutoff_at=job.upto.cutoff_at, last_event_id=job.upto.last_event_id),
        model="m", prompt_version="p", created_at=T0, job_id=job.job_id,
        report=SummaryReport(trigger=TriggerReport(name="event_threshold")),
    )  # fmt: skip


def running() -> tuple[TrackHandler, dict[str, TrackedKey], SummaryJob]:
    """A key whose job (up to e2) is in flight while e3 (a user turn: no trigger) comes in."""
    h = handler(threshold=1, wall_clock=lambda: T0.timestamp())
    table: dict[str, TrackedKey] = {}
    (job,) = feed(h, table, [event(1, "user"), event(2)])
    assert not feed(h, table, [event(3, "user")], start=2)
    assert job.upto.last_event_id == "e2" and [p.event_id for p in table[KEY].state.pending][-1] == "e3"
    return h, table, job


def swept(h: TrackHandler, table: dict[str, TrackedKey]) -> list[SummaryJob]:
    """The idle sweep's commands an hour later (through the sweep's index, as the worker runs it), applied."""
    watch = SweepWatch(idle=True)
    for key, value in table.items():
        watch.note(key, value)
    commands = sweep_commands(watch.entries(), now=LATER, idle_after_s=60, job_timeout_s=1e9)
    jobs: list[SummaryJob] = []
    for n, (_, _, command) in enumerate(commands):
        assert command.model_extra is not None and command.model_extra["origin"] == "idle_sweep"
        jobs += h.on_record(command, Coordinates("ev", 1, 10 + n), table, log_time=LATER).jobs
    return jobs


def test_events_after_an_answered_jobs_target_are_swept_once_the_session_is_idle() -> None:
    h, table, job = running()
    h.on_summary_record(summary_of(job), table, 0)
    state = table[KEY].state
    assert state.in_flight is None and [p.event_id for p in state.pending] == ["e3"]
    (idle,) = swept(h, table)
    assert idle.origin == "idle_sweep" and idle.upto.last_event_id == "e3" and idle.from_version == 1


def test_events_after_a_failed_jobs_target_are_swept_once_the_session_is_idle() -> None:
    """A failure that is not given up releases the key too (the job timeout no longer applies)."""
    h, table, job = running()
    h.on_summary_record(_given_up(job).model_copy(update={"gave_up": False}), table, 0)
    assert table[KEY].state.in_flight is None
    (idle,) = swept(h, table)
    assert idle.origin == "idle_sweep" and idle.upto.last_event_id == "e3"


def test_an_answered_key_has_no_emission_time_and_a_queued_job_keeps_it() -> None:
    h, table, job = running()
    assert table[KEY].emitted_wall == T0.timestamp()
    (second,) = feed(h, table, [event(4)], start=3)  # a model output: the next job, queued behind the first
    h.on_summary_record(summary_of(job), table, 0)
    value = table[KEY]
    assert value.state.in_flight is not None and value.state.in_flight.job_id == second.job_id
    assert value.emitted_wall is not None  # the queued job now in flight still times out
    h.on_summary_record(summary_of(second).model_copy(update={"version": 2}), table, 1)
    assert table[KEY].state.in_flight is None and table[KEY].emitted_wall is None


def test_a_value_written_with_the_answered_jobs_emission_time_left_on_it_is_swept() -> None:
    """As the changelog of an older build holds it (the worker recovers the table from it)."""
    h, table, job = running()
    h.on_summary_record(summary_of(job), table, 0)
    value = table[KEY]
    stored = TrackedKey(value.state, value.first_offset, value.partition, T0.timestamp(), value.record_key)
    table[KEY] = TrackedKey.from_bytes(stored.to_bytes())
    assert table[KEY].emitted_wall == T0.timestamp()
    (idle,) = swept(h, table)
    assert idle.origin == "idle_sweep" and idle.upto.last_event_id == "e3"


def test_a_given_up_key_is_swept_once_its_cooldown_is_over_and_not_poked_during_it() -> None:
    """The failure gives the job's range back; the sweep pokes it when the cooldown allows a job.

    During the cooldown the track agent refuses the poke: sent at every run of the sweep, it would
    add a record to the events topic each time for nothing.
    """
    policies = PolicySet(SummaryPolicy(checks=(EventThreshold(1),), failure_cooldown_s=600))
    h = TrackHandler(policies, wall_clock=lambda: T0.timestamp())
    table: dict[str, TrackedKey] = {}
    (job,) = feed(h, table, [event(1, "user"), event(2)])
    h.on_summary_record(_given_up(job), table, 0)
    assert table[KEY].state.in_flight is None and table[KEY].state.failed is not None
    watch = SweepWatch(idle=True)
    watch.note(KEY, table[KEY])
    kw = {"idle_after_s": 60.0, "job_timeout_s": 1e9, "policies": policies}
    assert not sweep_commands(watch.entries(), now=T0 + timedelta(seconds=300), **kw)  # cooling down
    after = T0 + timedelta(seconds=700)
    (poke,) = sweep_commands(watch.entries(), now=after, **kw)
    (retry,) = h.on_record(poke[2], Coordinates("ev", 1, 10), table, log_time=after).jobs
    assert retry.origin == "idle_sweep" and retry.upto.last_event_id == "e2"
