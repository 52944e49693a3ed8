"""Records delivered again change nothing: a rebalance or a restart resumes from the last commit.

A worker's commit may trail its changelog (a rebalance seeks a kept partition back to its
committed offset; a crash loses the commits after the last one), so the track agent sees
records its states already hold. The oracle is the same log delivered once: the jobs (ids,
targets) and the states must be equal. Found in a two-worker ``distill replay``: a decision
taken on a re-delivered model output judged the later state by it, and fired one event early
— on a user message whose answer the held-back rule waits for — so the replay's boundaries
differed from the live run's and its cache missed.
"""

from __future__ import annotations

import random
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
    SummaryReport,
    TriggerReport,
)
from streams.app.coordinates import Coordinates
from streams.app.track import TrackHandler
from streams.app.tracked import TrackedKey, table_key
from streams.rules.checks import EventThreshold
from streams.rules.policy import PolicySet, SummaryPolicy
from tests.unit.app.test_track_handler import T0, event, handler

KEY = table_key("a", "u", "s", "")


def rounds(n: int) -> list[SessionEvent]:
    """``n`` events: a user message, then its answer (a round per request id), alternately."""
    return [event(i, "user" if i % 2 == 0 else "assistant", request_id=f"r{i // 2}") for i in range(n)]


def summary_of(job: SummaryJob, version: int) -> SessionSummary:
    return SessionSummary(
        app_name="a", user_id="u", session_id="s", summary=f"v{version}", version=version,
        boundary=SummaryBoundary(cutoff_at=job.upto.cutoff_at, last_event_id=job.upto.last_event_id),
        model="m", prompt_version="p", created_at=T0,
        report=SummaryReport(trigger=TriggerReport(name="event_threshold")), job_id=job.job_id,
    )  # fmt: skip


class Log:
    """One partition's records (offset = index) folded by a track handler into a dict table."""

    def __init__(self, records: list[Any], h: TrackHandler) -> None:
        self.records = records
        self.h = h
        self.table: dict[str, TrackedKey] = {}
        self.jobs: list[tuple[str, str]] = []
        self.version = 0

    def deliver(self, offset: int, *, answer: bool) -> list[SummaryJob]:
        jobs = self.h.on_record(self.records[offset], Coordinates("ev", 0, offset), self.table).jobs
        self.jobs += [(j.job_id, j.upto.last_event_id) for j in jobs]
        if answer:
            for job in jobs:
                self.version += 1
                self.h.on_summary_record(summary_of(job, self.version), self.table)
        return jobs

    def restart(self) -> None:
        """Every state written to its changelog bytes and read back (a new owner recovers them)."""
        self.table = {k: TrackedKey.from_bytes(v.to_bytes()) for k, v in self.table.items()}


def once(records: list[Any], threshold: int = 12) -> Log:
    log = Log(records, handler(threshold))
    for offset in range(len(records)):
        log.deliver(offset, answer=True)
    return log


@pytest.mark.parametrize("seed", range(40))
def test_events_delivered_again_after_a_restart_decide_nothing(seed: int) -> None:
    rng = random.Random(seed)
    records = rounds(120)
    expected = once(records)
    assert [t for _, t in expected.jobs][:3] == ["e13", "e27", "e41"]  # a round is never split
    log = Log(records, handler(12))
    for offset in range(len(records)):
        log.deliver(offset, answer=True)
        if rng.random() < 0.15:
            log.restart()
            for again in range(max(0, offset - rng.randint(0, 6)), offset + 1):
                assert log.deliver(again, answer=True) == [], f"a job on {records[again].event_id} delivered again"
    assert log.jobs == expected.jobs
    assert log.table[KEY].state == expected.table[KEY].state


def test_the_replay_case_a_model_output_delivered_again_after_its_question_fires_no_early_boundary() -> None:
    """13 events after the boundary, the last a question: no job until its answer. Delivering the
    previous answer again used to fire on it, with the question inside (boundary e40, not e41)."""
    log = Log(rounds(42), handler(12))
    for offset in range(41):  # ... e39 (an answer), e40 (a question)
        log.deliver(offset, answer=True)
    assert [t for _, t in log.jobs] == ["e13", "e27"]
    assert log.deliver(39, answer=True) == []
    assert [j.upto.last_event_id for j in log.deliver(41, answer=True)] == ["e41"]


def test_a_forced_summarize_delivered_again_after_later_events_adds_no_boundary() -> None:
    records: list[Any] = rounds(6)
    records.append(Summarize(app_name="a", user_id="u", session_id="s", command_id="c", force=True))
    records += rounds(12)[6:]
    expected = once(records, threshold=100)
    assert [t for _, t in expected.jobs] == ["e5"]
    log = once(records, threshold=100)
    for again in range(4, len(records)):  # the commit was at offset 4
        assert log.deliver(again, answer=True) == []
    assert log.jobs == expected.jobs
    assert log.table[KEY].state == expected.table[KEY].state


def test_a_delete_delivered_again_after_later_events_keeps_them() -> None:
    records: list[Any] = rounds(4)
    records.append(DeleteSession(app_name="a", user_id="u", session_id="s", command_id="d"))
    records += rounds(8)[4:]
    expected = once(records, threshold=100)
    assert [p.event_id for p in expected.table[KEY].state.pending] == ["e4", "e5", "e6", "e7"]
    log = once(records, threshold=100)
    log.deliver(4, answer=True)
    assert log.table[KEY].state == expected.table[KEY].state


def test_a_sync_request_delivered_again_joins_its_boundary_and_fires_nothing() -> None:
    """Its first answer (the job it fired) may have been lost with the worker: it is asked again
    as a join, which moves no boundary; the later events do not make it fire a job of its own."""
    records: list[Any] = rounds(6)
    records.append(SummarizeSync(app_name="a", user_id="u", session_id="s", command_id="c", reply_to="c", force=True))
    records += rounds(30)[6:]
    expected = once(records, threshold=100)
    assert [t for _, t in expected.jobs] == ["e5"]
    log = once(records, threshold=100)
    out = log.h.on_record(records[6], Coordinates("ev", 0, 6), log.table)
    assert not out.replies
    assert [(j.origin, j.reply_to, j.upto.last_event_id) for j in out.jobs] == [("join", "c", "e5")]
    assert log.table[KEY].state == expected.table[KEY].state


class Answered(Log):
    """A log whose jobs are answered on a summaries topic of their own (offset = index): every
    third job is given up (a failure record), the others summarized."""

    def __init__(self, records: list[Any], h: TrackHandler) -> None:
        super().__init__(records, h)
        self.answers: list[SessionSummary | SummaryFailure] = []

    def deliver(self, offset: int, *, answer: bool) -> list[SummaryJob]:
        jobs = self.h.on_record(self.records[offset], Coordinates("ev", 0, offset), self.table).jobs
        self.jobs += [(j.job_id, j.upto.last_event_id) for j in jobs]
        for job in jobs:
            if len(self.jobs) % 3 == 0:
                record: SessionSummary | SummaryFailure = SummaryFailure(
                    app_name="a", user_id="u", session_id="s", job_id=job.job_id, error_class="ServerError",
                    reason="500", created_at=T0, gave_up=True,
                )  # fmt: skip
            else:
                self.version += 1
                record = summary_of(job, self.version)
            self.answers.append(record)
            self.h.on_summary_record(record, self.table, len(self.answers) - 1)
        return jobs

    def answers_again(self, count: int) -> None:
        for at in range(max(0, len(self.answers) - count), len(self.answers)):
            self.h.on_summary_record(self.answers[at], self.table, at)


@pytest.mark.parametrize("seed", range(30))
def test_answers_delivered_again_after_a_restart_change_nothing(seed: int) -> None:
    """A failure delivered again used to count once more (a longer cooldown, other boundaries)."""
    rng = random.Random(seed)
    records = rounds(150)
    expected = Answered(records, handler(6))
    for offset in range(len(records)):
        expected.deliver(offset, answer=True)
    assert any(isinstance(a, SummaryFailure) for a in expected.answers)
    log = Answered(records, handler(6))
    for offset in range(len(records)):
        log.deliver(offset, answer=True)
        if rng.random() < 0.2:
            log.restart()
            log.answers_again(rng.randint(1, 4))
            assert log.table[KEY].state == expected_state_at(records, offset)
    assert log.jobs == expected.jobs
    assert log.table[KEY].state == expected.table[KEY].state


def expected_state_at(records: list[Any], last: int) -> Any:
    run = Answered(records, handler(6))
    for offset in range(last + 1):
        run.deliver(offset, answer=True)
    return run.table[KEY].state


def test_a_timed_out_job_emitted_again_reads_no_further_than_it_first_did() -> None:
    """Found by a replay of a killed run (``test_pipeline_guarantees``): a job re-emitted after its
    timeout (event time: a replay's events pass it in a moment) read up to the *latest* event, so
    once the summaries it waited behind were in, it summarized a boundary no decision made."""
    h = TrackHandler(PolicySet(SummaryPolicy(checks=(EventThreshold(3),), job_timeout_s=8)))
    table: dict[str, TrackedKey] = {}
    records = rounds(16)
    first = [j for i in range(4) for j in h.on_record(records[i], Coordinates("ev", 0, 100 + i), table).jobs]
    assert [(j.upto.last_event_id, j.upto.offset) for j in first] == [("e3", 103)]
    later = [j for i in range(4, 16) for j in h.on_record(records[i], Coordinates("ev", 0, 100 + i), table).jobs]
    again = [j for j in later if j.job_id == first[0].job_id]
    assert again and all(j.upto.offset == 103 for j in again), [(j.origin, j.upto) for j in again]
    poke = Summarize(app_name="a", user_id="u", session_id="s", command_id="sweep", origin="retry")
    swept = h.on_record(poke, Coordinates("ev", 0, 200), table).jobs
    assert [(j.job_id, j.upto.offset) for j in swept] == [(first[0].job_id, 103)]
    restarted = {k: TrackedKey.from_bytes(v.to_bytes()) for k, v in table.items()}
    swept = h.on_record(poke, Coordinates("ev", 0, 201), restarted).jobs
    assert [(j.job_id, j.upto.offset) for j in swept] == [(first[0].job_id, 103)]


def test_a_sync_request_with_nothing_to_join_delivered_again_is_answered_again() -> None:
    """Asked before the session had anything: nothing to summarize, then and when delivered again."""
    records: list[Any] = [SummarizeSync(app_name="a", user_id="u", session_id="s", command_id="c", reply_to="c")]
    records += rounds(4)
    log = Log(records, handler(100))
    first = log.h.on_record(records[0], Coordinates("ev", 0, 0), log.table)
    for offset in range(1, len(records)):
        log.deliver(offset, answer=True)
    again = log.h.on_record(records[0], Coordinates("ev", 0, 0), log.table)
    assert not first.jobs and not again.jobs
    assert [(r.error_class, r.reply_to) for r in first.replies] == [("NothingToSummarize", "c")]
    assert [(r.error_class, r.reply_to) for r in again.replies] == [("NothingToSummarize", "c")]


def test_a_failure_delivered_again_after_a_delete_starts_no_cooldown() -> None:
    records: list[Any] = rounds(12)
    records.append(DeleteSession(app_name="a", user_id="u", session_id="s", command_id="d"))
    log = Answered(records, handler(1))
    for offset in range(len(records)):
        log.deliver(offset, answer=True)
    assert any(isinstance(a, SummaryFailure) for a in log.answers)
    before = log.table[KEY].state
    log.restart()
    log.answers_again(len(log.answers))
    assert log.table[KEY].state == before and before.failed is None
