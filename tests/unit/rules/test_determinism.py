"""Trigger decisions are a pure function of the event log (issue 13).

The property: the same events give the same jobs (ids and targets) and the same
summaries (boundaries and texts) whatever the summary latency — each summary
absorbed 0..N events after its job — and across worker restarts (every state
written to its changelog bytes and read back, then the records since the last
commit delivered again: a commit may trail the changelog). The oracle is a run whose
summaries come back at once. The summaries are the real summarizer's (with a
model echoing the event markers), so the held-back rounds of
``keep_recent_rounds`` / ``skip_recent_events`` are the summarizer's own, and
the summarize side is emulated like ``SummarizeHandler``: a key's jobs run in
order, each rebased on the key's latest summary, a job whose target that summary
covers is stale.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import SessionEvent, SessionSummary, SummarizeSync, SummaryJob
from schemas.settings import Settings, SummarySettings
from streams.app.tracked import TrackedKey
from streams.rules.boundaries import events_after
from streams.rules.filter_keys import in_summary_input
from streams.rules.planner import affected_keys, apply_command, apply_event, command_targets
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
    name = "echo"
    context_window = 128_000
    provider_budget = None

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, request: ChatRequest) -> ModelResponse:
        self.calls += 1
        text = "\n".join(str(m.get("content") or "") for m in request.messages)
        return ModelResponse(text=" ".join(dict.fromkeys(MARKER.findall(text))), model=self.name)


@dataclass
class Run:
    policy: SummaryPolicy
    summarizer: Summarizer
    delays: list[int]
    """Per job, how many later events arrive before it is answered (cycled)."""
    restarts: Mapping[int, int] = field(default_factory=dict)
    """After these event indexes every state is written to bytes and read back, then that many
    of the latest events are delivered again (with their offsets)."""
    log: list[SessionEvent] = field(default_factory=list)
    table: dict[str, SessionTriggerState] = field(default_factory=dict)
    heads: dict[str, SessionSummary] = field(default_factory=dict)
    jobs: list[tuple[str, str, str]] = field(default_factory=list)
    """(key, job id, target) of every decided job (re-emissions left out)."""
    summaries: list[tuple[str, str | None, str]] = field(default_factory=list)
    """(key, boundary event, text) of every summary made."""
    queue: list[tuple[int, SummaryJob]] = field(default_factory=list)
    emitted: int = 0
    asked: list[tuple[str, str, tuple[str, ...], tuple[str, ...]]] = field(default_factory=list)
    """Per sync request: (command, key, targets of the jobs it fired, targets of the joins it made)."""

    def publish(self, event: SessionEvent) -> None:
        self.log.append(event)
        last = len(self.log) - 1
        self.deliver(event, last)
        again = self.restarts.get(last)
        if again is not None:
            self.table = {
                k: TrackedKey.from_bytes(TrackedKey(SessionTriggerState.from_bytes(s.to_bytes())).to_bytes()).state
                for k, s in self.table.items()
            }
            for offset in range(max(0, last - again + 1), last + 1):
                self.deliver(self.log[offset], offset)

    def deliver(self, event: SessionEvent, offset: int) -> None:
        keys = affected_keys(event, self.policy, self.table.get(""))
        outcome = apply_event(event, self.policy, {k: self.table.get(k) for k in keys}, offset=offset)
        self.table.update(outcome.states)
        self.emit(outcome.jobs)
        self.drain(len(self.log))

    def ask(self, command: SummarizeSync) -> None:
        """A sync request after the last event (its jobs queue like the events'; a join changes nothing)."""
        keys = ("", *command_targets(command, self.policy))
        at = self.log[-1].timestamp
        outcome = apply_command(command, self.policy, {k: self.table.get(k) for k in keys}, at=at)
        self.table.update(outcome.states)
        fired = tuple(j.upto.last_event_id for j in outcome.jobs)
        joined = tuple(j.upto.last_event_id for j in outcome.joins)
        self.asked.append((command.command_id, command.filter_key, fired, joined))
        self.emit(outcome.jobs)

    def emit(self, jobs: tuple[SummaryJob, ...]) -> None:
        for job in jobs:
            if job.origin != "retry":
                self.jobs.append((job.filter_key, job.job_id, job.upto.last_event_id))
            delay = self.delays[self.emitted % len(self.delays)]
            self.emitted += 1
            self.queue.append((len(self.log) + delay, job))

    def drain(self, now: int) -> None:
        # In job order: the summarize side runs a key's jobs one at a time, in order.
        while self.queue and self.queue[0][0] <= now:
            _, job = self.queue.pop(0)
            self.answer(job)

    def answer(self, job: SummaryJob) -> None:
        key = job.filter_key
        head = self.heads.get(key)
        end = next(i for i, e in enumerate(self.log) if e.event_id == job.upto.last_event_id)
        if head is not None and head.boundary.last_event_id is not None:
            covered = next(i for i, e in enumerate(self.log) if e.event_id == head.boundary.last_event_id)
            if covered >= end:
                return  # stale: the head covers the job's target
        upto = [e for e in self.log[: end + 1] if in_summary_input(e.filter_key, key)]
        delta = events_after(upto, head.boundary if head else None)
        try:
            result = asyncio.run(self.summarizer.summarize(head.summary if head else "", delta, job.trigger))
        except SummarySkipped:
            self.table[key] = on_job_failed(self.table[key], job.job_id)
            return
        version = head.version + 1 if head else 1
        summary = SessionSummary(
            app_name="app",
            user_id="u",
            session_id="s",
            filter_key=key,
            summary=result.text,
            version=version,
            boundary=result.boundary(version, head.boundary if head else None),
            model=result.model,
            prompt_version=result.prompt_version,
            created_at=T0,
            report=result.report,
            job_id=job.job_id,
        )
        self.heads[key] = summary
        self.summaries.append((key, summary.boundary.last_event_id, summary.summary))
        self.table[key] = on_summary(self.table[key], summary)

    def finish(self) -> None:
        self.drain(10**9)


def build(summary: dict[str, object], delays: list[int], restarts: Mapping[int, int] | None = None) -> Run:
    s = Settings(summary=SummarySettings.model_validate(summary))
    return Run(
        policies_from_settings(s.summary, s.llm.model).default,
        build_summarizer(s, model=EchoModel()),  # type: ignore[arg-type]
        delays,
        restarts or {},
    )


def session(seed: int, rounds: int, branches: bool) -> list[SessionEvent]:
    """A session of ``rounds`` user turns, each answered by 1-3 model outputs (some keyed to a branch)."""
    rng = random.Random(seed)
    out: list[SessionEvent] = []
    for r in range(rounds):
        turns = [("user", "user")] + [("assistant", "agent")] * rng.randint(1, 3)
        for role, author in turns:
            n = len(out)
            key = "app/b" if branches and role == "assistant" and rng.random() < 0.4 else ""
            out.append(
                SessionEvent(
                    app_name="app",
                    user_id="u",
                    session_id="s",
                    event_id=f"e{n:03d}",
                    timestamp=T0 + timedelta(seconds=n),
                    request_id=f"req-{r}",
                    author=author,
                    filter_key=key,
                    message={"role": role, "content": f"{'问题' if role == 'user' else '回答'} {r} M{n:03d}"},
                )
            )
    return out


CONFIGS: list[dict[str, object]] = [
    {"event_threshold": 4},
    {"conversation_threshold": 2, "keep_recent_rounds": 2},
    {"conversation_threshold": 3, "keep_recent_rounds": 4},
    {"event_threshold": 3, "skip_recent_events": 3},
    {"conversation_threshold": 1, "keep_recent_rounds": 1, "skip_recent_events": 5},
    {"token_threshold": 20, "keep_recent_rounds": 1},
    {"event_threshold": 2, "job_timeout_s": 4},  # slow answers are re-emitted: no boundary moves
]


def replay(
    config: dict[str, object], events: list[SessionEvent], delays: list[int], restarts: Mapping[int, int]
) -> Run:
    run = build(config, delays, restarts)
    for event in events:
        run.publish(event)
    run.finish()
    return run


@settings(max_examples=120, deadline=None)
@given(
    config=st.sampled_from(CONFIGS),
    seed=st.integers(0, 10_000),
    rounds=st.integers(3, 14),
    branches=st.booleans(),
    delays=st.lists(st.integers(0, 7), min_size=1, max_size=6),
    restarts=st.dictionaries(st.integers(0, 60), st.integers(0, 8), max_size=4),
)
def test_boundaries_do_not_depend_on_summary_latency_or_restarts(
    config: dict[str, object],
    seed: int,
    rounds: int,
    branches: bool,
    delays: list[int],
    restarts: Mapping[int, int],
) -> None:
    events = session(seed, rounds, branches)
    instant = replay(config, events, [0], {})
    slow = replay(config, events, delays, restarts)
    assert slow.jobs == instant.jobs
    assert slow.summaries == instant.summaries
    # no event lost: every event of the key up to its last boundary is in its last summary
    for key, head in instant.heads.items():
        kept = {e.event_id for e in events_after(instant.log, head.boundary)}
        for event in instant.log:
            if in_summary_input(event.filter_key, key) and event.event_id not in kept:
                assert MARKER.search(event.message.content or "").group(0) in head.summary  # type: ignore[union-attr]


def test_a_summary_arriving_late_gives_the_boundaries_of_an_instant_one() -> None:
    """The issue's example: summaries landing 5 events after their job (event threshold 4)."""
    events = session(7, 8, False)
    instant = replay({"event_threshold": 4}, events, [0], {})
    late = replay({"event_threshold": 4}, events, [5], {})
    assert len(instant.jobs) >= 3
    assert [t for _, _, t in late.jobs] == [t for _, _, t in instant.jobs]
    assert late.summaries == instant.summaries


def requests_after(events: list[SessionEvent], seed: int) -> dict[int, list[SummarizeSync]]:
    """Sync requests (forced or not, for the event's key) after some model outputs, by event index."""
    rng = random.Random(seed)
    out: dict[int, list[SummarizeSync]] = {}
    for i, e in enumerate(events):
        if e.message.role == "assistant" and rng.random() < 0.5:
            out[i] = [
                SummarizeSync(app_name="app", user_id="u", session_id="s", command_id=f"c{i}-{n}",
                              reply_to=f"c{i}-{n}", filter_key=e.filter_key, force=rng.random() < 0.4)
                for n in range(rng.randint(1, 2))
            ]  # fmt: skip
    return out


def replay_asking(
    config: dict[str, object],
    events: list[SessionEvent],
    asks: dict[int, list[SummarizeSync]],
    delays: list[int],
    restarts: Mapping[int, int],
) -> Run:
    run = build(config, delays, restarts)
    for i, event in enumerate(events):
        run.publish(event)
        for command in asks.get(i, ()):
            run.ask(command)
    run.finish()
    return run


@settings(max_examples=80, deadline=None)
@given(
    config=st.sampled_from(CONFIGS),
    seed=st.integers(0, 10_000),
    rounds=st.integers(3, 10),
    branches=st.booleans(),
    delays=st.lists(st.integers(0, 7), min_size=1, max_size=6),
    restarts=st.dictionaries(st.integers(0, 40), st.integers(0, 8), max_size=3),
)
def test_sync_requests_fire_and_join_the_same_boundaries_whatever_the_latency(
    config: dict[str, object],
    seed: int,
    rounds: int,
    branches: bool,
    delays: list[int],
    restarts: Mapping[int, int],
) -> None:
    """A request's job or join is decided from the log alone: summaries coming back late (or a
    restart) change neither, and a request never adds a job for a boundary a job already has."""
    events = session(seed, rounds, branches)
    asks = requests_after(events, seed)
    instant = replay_asking(config, events, asks, [0], {})
    slow = replay_asking(config, events, asks, delays, restarts)
    assert slow.asked == instant.asked
    assert slow.jobs == instant.jobs
    assert slow.summaries == instant.summaries
    targets = [(key, target) for key, _, target in instant.jobs]
    assert len(targets) == len(set(targets)), "two jobs for one boundary"
    for _, _, fired, joined in instant.asked:
        assert len(fired) + len(joined) <= 1
