"""The per-key failure cooldown and the learned window (pure: state + policy + event, event time only).

A key whose job was given up gets no new job on later events until one at
least ``failure_cooldown_s`` later (event time); each further failure in a
row doubles it up to ``failure_cooldown_max_s``; the first job after it is
the half-open retry; a summary ends the run. A window a context-length
refusal named is kept and every next job carries it. All of it survives the
changelog (both row and object forms) and older rows still read.
"""

from __future__ import annotations

import json

from schemas import SessionEvent
from streams.app.tracked import TrackedKey
from streams.rules.boundaries import to_micros
from streams.rules.checks import EventThreshold
from streams.rules.planner import apply_event
from streams.rules.policy import SummaryPolicy
from streams.rules.state_rows import state_from_row, state_to_row
from streams.rules.trigger_state import (
    SessionTriggerState,
    decide,
    mark_emitted,
    on_job_failed,
    on_summary,
)

from .factory import at, ev, summary
from .test_trigger_state import SIMPLE, fold

COOL = SummaryPolicy(checks=(EventThreshold(0),), counter=SIMPLE, failure_cooldown_s=60, failure_cooldown_max_s=200)


def _failed_at(state: SessionTriggerState, seconds: float, job: str = "job-1") -> SessionTriggerState:
    """``job`` emitted at ``seconds`` (the last event) and given up."""
    state = mark_emitted(state, job, state.pending[-1].event_id, to_micros(at(seconds)))
    return on_job_failed(state, job, gave_up=True)


def _events_until(state: SessionTriggerState, start: int, end: int, step: int = 5) -> list[tuple[int, bool]]:
    """``(second, fired)`` for one assistant event every ``step`` seconds in ``[start, end)``."""
    out = []
    for s in range(start, end, step):
        event = ev(f"e{s}", s)
        state = fold([event], state=state)
        out.append((s, decide(state, COOL, event).fire))
    return out


def test_after_a_given_up_job_no_job_fires_until_the_cooldown_has_passed_in_event_time() -> None:
    state = _failed_at(fold([ev("e0", 0)]), 0)
    assert state.in_flight is None and state.failed is not None and state.failed.failures == 1
    later = ev("e30", 30)
    cooling = fold([later], state=state)
    assert decide(cooling, COOL, later).reason == "cooling_down"
    fired = [s for s, f in _events_until(state, 5, 120) if f]
    assert fired[0] == 60  # the half-open retry: the first event at least 60 s after the failure
    # purity: the same state, policy and event decide the same, and the state is unchanged
    assert decide(cooling, COOL, later) == decide(cooling, COOL, later)
    assert cooling.failed == state.failed


def test_each_failure_in_a_row_doubles_the_cooldown_up_to_its_maximum() -> None:
    state = fold([ev("e0", 0)])
    windows = []
    t = 0
    for n in range(1, 5):
        state = _failed_at(state, t, job=f"job-{n}")
        fired = next(s for s, f in _events_until(state, t + 1, t + 1000, step=1) if f)
        windows.append(fired - t)
        state = fold([ev(f"e{fired}", fired)], state=state)
        t = fired
    assert windows == [60, 120, 200, 200]


def test_a_summary_ends_the_run_of_failures_and_the_next_event_may_fire() -> None:
    state = _failed_at(fold([ev("e0", 0), ev("e1", 1)]), 1)
    state = on_summary(state, summary(1, "e0", 0))
    assert state.failed is None
    event = ev("e2", 2)
    assert decide(fold([event], state=state), COOL, event).fire


def test_force_and_a_failure_that_did_not_give_up_skip_the_cooldown() -> None:
    state = _failed_at(fold([ev("e0", 0)]), 0)
    assert decide(state, COOL, force=True).fire
    plain = on_job_failed(mark_emitted(fold([ev("e0", 0)]), "j", "e0", 0), "j")  # e.g. nothing to summarize
    assert plain.failed is None and plain.in_flight is None
    event = ev("e1", 1)
    assert decide(fold([event], state=plain), COOL, event).fire


def test_a_plain_command_while_cooling_down_fires_nothing() -> None:
    state = _failed_at(fold([ev("e0", 0)]), 0)
    assert decide(state, COOL).reason == "cooling_down"


def test_a_cooldown_of_zero_is_off() -> None:
    off = SummaryPolicy(checks=(EventThreshold(0),), counter=SIMPLE, failure_cooldown_s=0)
    state = _failed_at(fold([ev("e0", 0)]), 0)
    event = ev("e1", 1)
    assert decide(fold([event], state=state), off, event).fire


def _assistant(event_id: str, seconds: int) -> SessionEvent:
    return ev(event_id, seconds)


def test_a_permanently_refused_key_makes_a_bounded_number_of_jobs() -> None:
    # 40 assistant events, one every 10 s, every job refused: the cooldown (60 s doubling to
    # 200 s) lets through the half-open retries only, where the old fold made 40 jobs.
    states: dict[str, SessionTriggerState | None] = {}
    jobs = 0
    for i in range(40):
        out = apply_event(_assistant(f"a{i}", i * 10), COOL, states)
        states = dict(out.states)
        for job in out.jobs:
            jobs += 1
            key = job.filter_key
            st = states[key]
            assert st is not None
            states[key] = on_job_failed(st, job.job_id, gave_up=True)
    assert jobs <= 4, jobs


def test_the_learned_window_is_kept_across_summaries_and_carried_by_the_next_jobs() -> None:
    state = mark_emitted(fold([ev("e0", 0)]), "j", "e0", 0)
    state = on_job_failed(state, "j", gave_up=True, window=4096)
    assert state.learned_window == 4096
    state = on_summary(state, summary(1, "e0", 0))
    assert state.learned_window == 4096 and state.failed is None
    out = apply_event(ev("e1", 100), COOL, {"": state})
    [job] = out.jobs
    assert job.summary_context_window == 4096


def test_failures_and_the_window_survive_the_changelog_both_forms() -> None:
    state = on_job_failed(mark_emitted(fold([ev("e0", 0)]), "j", "e0", 0), "j", gave_up=True, window=900)
    row = json.loads(json.dumps(state_to_row(state)))
    assert len(row) == 13 and state_from_row(row) == state
    assert SessionTriggerState.from_bytes(state.to_bytes()) == state
    tracked = TrackedKey(state, 3, 1, None)
    assert TrackedKey.from_bytes(tracked.to_bytes()).state == state


def test_rows_without_failures_keep_the_older_layout_and_older_rows_read() -> None:
    state = fold([ev("e0", 0)])
    row = json.loads(json.dumps(state_to_row(state)))
    assert len(row) == 12  # what builds before the cooldown wrote and read
    back = state_from_row(row)
    assert back == state and back.failed is None and back.learned_window is None


def test_a_timed_out_in_flight_job_is_not_re_emitted_while_its_key_cools_down() -> None:
    # J1 given up, and a re-emission J2 still marked in flight: later events re-emit nothing
    # during the cooldown (the event-time job timeout is 5 s here).
    p = SummaryPolicy(checks=(EventThreshold(0),), counter=SIMPLE, job_timeout_s=5, failure_cooldown_s=60)
    state = _failed_at(fold([ev("e0", 0)]), 0)
    state = mark_emitted(state, "job-2", "e0", 0, attempt=1)
    event = ev("e30", 30)
    assert decide(fold([event], state=state), p, event).reason == "cooling_down"
