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

from schemas import SessionEvent, SessionSummary
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
    """The round after which each summary was made."""

    def publish(self, event: SessionEvent, round_no: int) -> None:
        self.log.append(event)
        keys = affected_keys(event, self.policy, self.table.get(""))
        outcome = apply_event(event, self.policy, {k: self.table.get(k) for k in keys}, offset=len(self.log) - 1)
        self.table.update(outcome.states)
        for job in outcome.jobs:
            self.jobs += 1
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


def pipeline(**summary: object) -> Pipeline:
    settings = Settings(summary=SummarySettings.model_validate(summary))
    model = EchoModel()
    return Pipeline(
        policies_from_settings(settings.summary, settings.llm.model).default,
        build_summarizer(settings, model=model),  # type: ignore[arg-type]
        model,
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
