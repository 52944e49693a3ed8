"""A ``summarize_sync`` that fires no job joins the key's decided boundary (pure rules, no services).

The Go guide's ``CreateSessionSummary`` waits for the key's running job; here
the request's ``join`` job waits behind it and is answered with the summary it
made. The join is decided from the trigger state alone (the decided boundary,
never how far the summaries came back), changes no state and is in no queue:
the intermediate tool results of a run whose agent asks before every model
call cost one job per boundary, not one per ask.
"""

from __future__ import annotations

from datetime import timedelta
from itertools import count

import pytest

from schemas import SessionEvent, SummarizeSync, SummaryJob
from streams.rules.checks import EventThreshold
from streams.rules.planner import Outcome, apply_command, apply_event, command_targets
from streams.rules.policy import SummaryPolicy
from streams.rules.trigger_state import SessionTriggerState, on_job_failed, on_summary, to_dict

from .factory import T0, at, ev, summary

ALWAYS = SummaryPolicy(checks=())
"""Fires on every event that may trigger (a tool result with no call left open, an answer)."""


class Session:
    """A session's trigger state driven event by event and request by request."""

    def __init__(self, policy: SummaryPolicy = ALWAYS) -> None:
        self.policy = policy
        self.table: dict[str, SessionTriggerState] = {}
        self.jobs: list[SummaryJob] = []
        self.joins: list[SummaryJob] = []
        self.seconds = 0
        self.ids = count(1)

    def publish(self, event: SessionEvent) -> Outcome:
        outcome = apply_event(event, self.policy, dict(self.table), offset=int(event.event_id[1:]))
        self.table.update(outcome.states)
        self.jobs += outcome.jobs
        return outcome

    def ask(self, *, force: bool = False, filter_key: str = "") -> Outcome:
        n = next(self.ids)
        command = SummarizeSync(app_name="app", user_id="u", session_id="s", command_id=f"c{n}", reply_to=f"r{n}",
                                filter_key=filter_key, force=force)  # fmt: skip
        keys = ("", *command_targets(command, self.policy))
        outcome = apply_command(command, self.policy, {k: self.table.get(k) for k in keys}, at=at(self.seconds))
        self.table.update(outcome.states)
        self.jobs += outcome.jobs
        self.joins += outcome.joins
        return outcome

    def next_id(self) -> tuple[str, float]:
        self.seconds += 1
        return f"e{self.seconds}", self.seconds

    def user(self, text: str) -> SessionEvent:
        eid, t = self.next_id()
        return ev(eid, t, role="user", content=text)

    def call(self, call_id: str) -> SessionEvent:
        eid, t = self.next_id()
        return ev(eid, t, content=None, tool_calls=[(call_id, "search", '{"q": "奥斯陆"}')])

    def result(self, call_id: str, text: str = "结果: 两班航班") -> SessionEvent:
        eid, t = self.next_id()
        return ev(eid, t, role="tool", content=text, tool_call_id=call_id, name="search")

    def answer(self, text: str = "已订好。") -> SessionEvent:
        eid, t = self.next_id()
        return ev(eid, t, content=text)

    def state(self, key: str = "") -> SessionTriggerState:
        return self.table[key]


def tool_round(s: Session) -> SummaryJob:
    """User, tool call, tool result: the result's job (the round's, in flight)."""
    s.publish(s.user("飞奥斯陆的航班?"))
    s.publish(s.call("c1"))
    (job,) = s.publish(s.result("c1")).jobs
    return job


@pytest.mark.parametrize("force", [False, True])
def test_a_request_after_the_round_joins_the_rounds_job_and_changes_nothing(force: bool) -> None:
    """The issue's case: the round's job is in flight; the request used to answer nothing to summarize."""
    s = Session()
    job = tool_round(s)
    before = to_dict(s.state())
    outcome = s.ask(force=force)
    assert not outcome.jobs, "a second job for the same boundary"
    (join,) = outcome.joins
    assert join.origin == "join" and join.reply_to == "r1" and join.force is force
    assert (join.upto.last_event_id, join.upto.cutoff_at) == (job.upto.last_event_id, job.upto.cutoff_at)
    assert join.job_id != job.job_id
    assert to_dict(s.state()) == before  # not queued, no boundary moved


def test_a_request_after_the_summary_came_back_joins_the_same_boundary() -> None:
    """Whether the round's summary is applied yet does not change the request's join."""
    live, instant = Session(), Session()
    job = tool_round(live)
    tool_round(instant)
    instant.table[""] = on_summary(instant.state(), summary(1, job.upto.last_event_id, 3, job_id=job.job_id))
    (late,) = live.ask().joins
    (early,) = instant.ask().joins
    assert (late.upto, late.job_id) == (early.upto, early.job_id)


def test_a_summary_holding_events_back_still_joins_the_decided_boundary() -> None:
    s = Session()
    job = tool_round(s)
    s.table[""] = on_summary(s.state(), summary(1, "e1", 1, job_id=job.job_id))  # e2, e3 held back
    (join,) = s.ask(force=True).joins
    assert join.upto.last_event_id == job.upto.last_event_id


def test_a_request_with_new_events_fires_its_own_job_instead() -> None:
    s = Session(SummaryPolicy(checks=(EventThreshold(100),)))
    s.publish(s.user("飞奥斯陆的航班?"))
    s.publish(s.answer("SAS 09:10。"))
    outcome = s.ask(force=True)
    (job,) = outcome.jobs
    assert not outcome.joins and job.reply_to == "r1" and job.upto.last_event_id == "e2"
    assert s.state().decided_id == "e2"


def test_thresholds_not_met_join_the_last_decided_job_for_the_newest_summary() -> None:
    """Go: ``CreateSessionSummary(force=false)`` makes nothing, the caller reads the latest summary."""
    s = Session(SummaryPolicy(checks=(EventThreshold(100),)))
    s.publish(s.user("q"))
    s.publish(s.answer("a"))
    (first,) = s.ask(force=True).jobs
    s.publish(s.user("更短一点。"))
    s.publish(s.answer("好的。"))
    outcome = s.ask()
    assert not outcome.jobs and outcome.decisions[0].reason == "checks_failed"
    (join,) = outcome.joins
    assert join.upto.last_event_id == first.upto.last_event_id


def test_nothing_decided_and_no_summary_leaves_nothing_to_wait_for() -> None:
    s = Session(SummaryPolicy(checks=(EventThreshold(100),)))
    s.publish(s.user("q"))
    s.publish(s.answer("a"))
    outcome = s.ask()
    assert not outcome.jobs and not outcome.joins
    assert [d.reason for d in outcome.decisions] == ["checks_failed"]
    empty = Session().ask(force=True)
    assert not empty.jobs and not empty.joins and empty.decisions[0].reason == "empty_delta"


def test_a_refused_key_joins_nothing() -> None:
    s = Session(SummaryPolicy(checks=(), allowlist=frozenset({"app/other"})))
    tool_round(s)
    outcome = s.ask(filter_key="app/b")
    assert not outcome.jobs and not outcome.joins and outcome.decisions[0].reason == "not_allowed"


def test_a_given_up_job_gives_its_range_back_and_the_request_decides_it_again() -> None:
    s = Session()
    job = tool_round(s)
    s.table[""] = on_job_failed(s.state(), job.job_id, gave_up=True, at=0)
    outcome = s.ask(force=True)
    # a forced request on the range the failure gave back: its own job (the Go lock released)
    assert [j.upto.last_event_id for j in outcome.jobs] == [job.upto.last_event_id] and not outcome.joins


def test_a_key_cooling_down_joins_its_applied_summary() -> None:
    s = Session()
    job = tool_round(s)
    s.table[""] = on_summary(s.state(), summary(1, job.upto.last_event_id, 3, job_id=job.job_id))
    s.publish(s.user("再查一次。"))
    s.publish(s.call("c2"))
    (second,) = s.publish(s.result("c2")).jobs
    s.table[""] = on_job_failed(s.state(), second.job_id, gave_up=True, at=0)
    outcome = s.ask()
    assert outcome.decisions[0].reason == "cooling_down" and not outcome.jobs
    (join,) = outcome.joins
    assert join.upto.last_event_id == job.upto.last_event_id  # the summary there is


@pytest.mark.parametrize("force", [False, True])
def test_a_run_asking_before_each_model_call_makes_one_job_per_boundary(force: bool) -> None:
    """``WithSyncSummaryIntraRun``: 3 tool rounds, a request before every model call but the first."""
    s = Session()
    s.publish(s.user("订一张去奥斯陆的机票。"))
    results = []
    for i in range(3):
        s.publish(s.call(f"c{i}"))  # model call i+1
        result = s.result(f"c{i}")
        s.publish(result)
        results.append(result.event_id)
        s.ask(force=force)  # before model call i+2
    s.publish(s.answer())  # model call 4: the final answer
    boundaries = [j.upto.last_event_id for j in s.jobs]
    assert boundaries == [*results, "e8"]  # each tool result and the final answer, once
    assert [j.upto.last_event_id for j in s.joins] == results  # each request waits for its round's job


def test_a_run_whose_tool_results_do_not_fire_gets_its_jobs_from_the_requests() -> None:
    """With thresholds the tool results do not meet, a forced request fires the round's one job."""
    s = Session(SummaryPolicy(checks=(EventThreshold(100),)))
    s.publish(s.user("订一张去奥斯陆的机票。"))
    for i in range(3):
        s.publish(s.call(f"c{i}"))
        s.publish(s.result(f"c{i}"))
        s.ask(force=True)
        s.ask(force=True)  # asking twice for the same round joins the first request's job
    assert [j.upto.last_event_id for j in s.jobs] == ["e3", "e5", "e7"]
    assert [j.upto.last_event_id for j in s.joins] == ["e3", "e5", "e7"]


def test_join_timestamps_are_the_targets() -> None:
    s = Session()
    tool_round(s)
    (join,) = s.ask().joins
    assert join.upto.cutoff_at == T0 + timedelta(seconds=3) and join.created_at == at(3)
