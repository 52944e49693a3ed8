"""Triggers and the summarizer together, without services: how many LLM calls a configuration makes.

A small in-process pipeline: every event is folded by the planner (the track
agent's rules), every emitted job is answered at once by the real summarizer
(with a model that echoes the event markers it is given), and the summary is
folded back with ``on_summary``. The oracle is the markers: every event up to
the final boundary is in the final summary, every later one is pending.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from schemas import SessionEvent, SessionSummary, SummaryJob
from schemas.settings import Settings, SummarySettings
from streams.rules.boundaries import events_after
from streams.rules.planner import affected_keys, apply_event
from streams.rules.policy import SummaryPolicy, policies_from_settings
from streams.rules.trigger_state import SessionTriggerState, on_job_failed, on_summary
from streams.summarizer import SummarySkipped
from streams.summarizer.factory import build_summarizer
from streams.summarizer.model import ModelResponse
from streams.summarizer.request import ChatRequest
from streams.summarizer.summarizer import Summarizer

T0 = datetime(2025, 5, 1, 9, 0, tzinfo=UTC)
MARKER = re.compile(r"\bM\d{3}\b")


class EchoModel:
    """Answers with every marker of its request (the previous summary's included)."""

    name = "echo"
    context_window = 128_000
    provider_budget = None

    def __init__(self) -> None:
        self.requests: list[ChatRequest] = []

    async def complete(self, request: ChatRequest) -> ModelResponse:
        self.requests.append(request.clone())
        text = "\n".join(str(m.get("content") or "") for m in request.messages)
        return ModelResponse(text=" ".join(dict.fromkeys(MARKER.findall(text))), model=self.name)


def marker(event: SessionEvent) -> str:
    found = MARKER.search(event.message.content or "")
    assert found is not None
    return found.group(0)


@dataclass
class Pipeline:
    policy: SummaryPolicy
    summarizer: Summarizer
    model: EchoModel
    log: list[SessionEvent] = field(default_factory=list)
    table: dict[str, SessionTriggerState] = field(default_factory=dict)
    summaries: list[SessionSummary] = field(default_factory=list)
    jobs: int = 0
    schedule: list[int] = field(default_factory=list)
    """The round in which each job was emitted, for the jobs that made a summary."""
    delay: int = 0
    """How many later events arrive before a job is answered (the summary is written meanwhile)."""
    queue: list[tuple[int, int, SummaryJob]] = field(default_factory=list)

    def publish(self, event: SessionEvent, round_no: int) -> None:
        self.log.append(event)
        keys = affected_keys(event, self.policy, self.table.get(""))
        outcome = apply_event(event, self.policy, {k: self.table.get(k) for k in keys}, offset=len(self.log) - 1)
        self.table.update(outcome.states)
        for job in outcome.jobs:
            self.jobs += 1
            self.queue.append((len(self.log) + self.delay, round_no, job))
        self.drain(len(self.log))

    def drain(self, now: int) -> None:
        while self.queue and self.queue[0][0] <= now:
            _, round_no, job = self.queue.pop(0)
            self.answer(job.filter_key, job.job_id, job.upto.last_event_id, job.trigger, round_no)

    def answer(self, key: str, job_id: str, upto: str, trigger: object, round_no: int) -> None:
        head = self.summaries[-1] if self.summaries else None
        end = next(i for i, e in enumerate(self.log) if e.event_id == upto)
        delta = events_after(self.log[: end + 1], head.boundary if head else None)
        try:
            result = asyncio.run(self.summarizer.summarize(head.summary if head else "", delta, trigger))  # type: ignore[arg-type]
        except SummarySkipped:
            self.table[key] = on_job_failed(self.table[key], job_id)
            return
        version = len(self.summaries) + 1
        summary = SessionSummary(
            app_name="app",
            user_id="u",
            session_id="s",
            filter_key=key,
            summary=result.text,
            version=version,
            previous_version=version - 1 or None,
            boundary=result.boundary(version, head.boundary if head else None),
            previous_boundary=head.boundary if head else None,
            model=result.model,
            prompt_version=result.prompt_version,
            created_at=T0,
            report=result.report,
            job_id=job_id,
        )
        self.summaries.append(summary)
        self.schedule.append(round_no)
        self.table[key] = on_summary(self.table[key], summary)

    def check_markers(self) -> None:
        """Every event up to the boundary is in the final summary; every later one is pending."""
        head = self.summaries[-1]
        after = {e.event_id for e in events_after(self.log, head.boundary)}
        covered = [e for e in self.log if e.event_id not in after]
        assert covered, "nothing was summarized"
        missing = [marker(e) for e in covered if marker(e) not in head.summary]
        assert not missing, f"markers lost before the boundary: {missing}"
        pending = {p.event_id for p in self.table[""].pending}
        assert pending == after


def pipeline(delay: int = 0, **summary: object) -> Pipeline:
    settings = Settings(summary=SummarySettings.model_validate(summary))
    model = EchoModel()
    return Pipeline(
        policies_from_settings(settings.summary, settings.llm.model).default,
        build_summarizer(settings, model=model),  # type: ignore[arg-type]
        model,
        delay=delay,
    )


def run_rounds(p: Pipeline, rounds: int, user: str = "user") -> None:
    """``rounds`` conversations of one user turn (role ``user``, author ``user``) and one answer."""
    n = 0
    for r in range(1, rounds + 1):
        for role, author, text in (("user", user, "问题"), ("assistant", "agent", "回答")):
            p.publish(
                SessionEvent(
                    app_name="app",
                    user_id="u",
                    session_id="s",
                    event_id=f"e{n:03d}",
                    timestamp=T0 + timedelta(seconds=n),
                    request_id=f"req-{r}",
                    author=author,
                    message={"role": role, "content": f"{text} {r} M{n:03d}"},
                ),
                r,
            )
            n += 1


def test_a_producer_naming_its_user_gets_summaries_with_keep_recent_rounds() -> None:
    # author "alice", role "user": rounds (summarizer) and triggers (counters) agree on the role.
    p = pipeline(conversation_threshold=2, keep_recent_rounds=1)
    run_rounds(p, 6, user="alice")
    assert p.summaries, f"{p.jobs} jobs and no summary"
    assert p.model.requests
    p.check_markers()


def test_the_python_guides_configuration_makes_the_guides_three_calls_in_13_rounds() -> None:
    """Conversation threshold 3, keep 4 rounds (the Python "Session Summarizer" guide).

    The guide's framework counts the runs since its last summary (a counter
    reset when a summary is made) and fires when the count is above 3; the
    rounds it keeps back are not counted again. Its check after run 4 finds
    nothing to summarize beyond the 4 kept rounds (the counter stays at 4), so
    it summarizes after runs 5 (round 1), 9 (rounds 2-5) and 13 (rounds 6-9):
    3 LLM calls. distill counted the held-back rounds again and summarized
    after every round from round 5 on: 9 calls.
    """
    p = pipeline(conversation_threshold=3, keep_recent_rounds=4)
    run_rounds(p, 13)
    assert len(p.model.requests) == 3, f"{len(p.model.requests)} LLM calls after rounds {p.schedule}"
    assert p.schedule == [5, 9, 13]
    assert p.jobs == 3
    p.check_markers()
    # the last summary holds rounds 1-9; rounds 10-13 are held back, pending and visible
    assert [marker(e) for e in events_after(p.log, p.summaries[-1].boundary)] == [f"M{n:03d}" for n in range(18, 26)]


@pytest.mark.parametrize(
    ("settings", "schedule"),
    [
        # Go-style event threshold with kept rounds: the 8 held-back events are not counted again;
        # after round 5 the next summary waits for 7 new events (round 9).
        ({"event_threshold": 6, "keep_recent_rounds": 4}, [5, 9, 13]),
        # skip_recent_events: 3 events held back each time; 5 new events fire the next pass.
        ({"event_threshold": 4, "skip_recent_events": 3}, [3, 6, 9, 12]),
        # both: the larger hold-back (5 events) wins; round 2 is held back whole (4 events), round 3 fires,
        # then every 2 new rounds (> 1) fire the next pass
        ({"conversation_threshold": 1, "keep_recent_rounds": 1, "skip_recent_events": 5}, [3, 5, 7, 9, 11, 13]),
    ],
)
def test_held_back_events_do_not_count_toward_the_next_trigger(settings: dict[str, int], schedule: list[int]) -> None:
    p = pipeline(**settings)
    run_rounds(p, 13)
    assert p.schedule == schedule
    assert len(p.model.requests) == len(schedule) == p.jobs
    p.check_markers()


@pytest.mark.parametrize("delay", [1, 2, 3])
def test_events_arriving_while_the_pass_runs_count_and_none_is_lost(delay: int) -> None:
    # The next user turn (and its answer) arrive before the summary is written: they are new rounds,
    # counted toward the next trigger; the held-back rounds stay pending until a later pass.
    p = pipeline(delay, conversation_threshold=3, keep_recent_rounds=4)
    run_rounds(p, 13)
    p.drain(len(p.log) + delay)
    assert p.schedule == [5, 9, 13]
    assert len(p.model.requests) == 3
    p.check_markers()
