"""The agent side across an epoch switch: versions count per epoch, the read side serves one epoch.

After a session switches lines (``schemas.epochs``) the served head may carry a
lower version than the summaries this process was answered with before (a
replay's versions restart at 1). The facade's "wait until Cassandra shows the
summary I was answered with" and the backend's "a newer summary this process
received" must not compare versions of two epochs: the facade would wait for a
version the served line never reaches and fail, the backend would keep serving
the line the session left. Fakes stand for Kafka and Cassandra (no service).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from projections.read_api import StoredSummary
from schemas import SessionKey, SessionSummary, SummaryBoundary, SummaryReport, TriggerReport
from schemas.reads import AppliedSummary, ContextRead
from schemas.settings import Settings
from streams.adapters.backend import SessionBackend
from streams.agent.facade import DistillAgent, ProjectionBehindError

KEY = SessionKey("app", "u1", "s1")
T = datetime(2026, 1, 1, tzinfo=UTC)


def summary(epoch: int, version: int, text: str) -> SessionSummary:
    return SessionSummary(
        app_name=KEY.app_name, user_id=KEY.user_id, session_id=KEY.session_id, summary=text, version=version,
        epoch=epoch, boundary=SummaryBoundary(cutoff_at=T, last_event_id="e5"), model="m", prompt_version="p",
        created_at=T, report=SummaryReport(trigger=TriggerReport(name="manual")), job_id=f"j-{epoch}-{version}",
    )  # fmt: skip


def read_of(s: SessionSummary) -> ContextRead:
    applied = AppliedSummary(filter_key="", version=s.version, summary=s.summary, boundary=s.boundary,
                             source="exact", epoch=s.epoch)  # fmt: skip
    return ContextRead(app_name=KEY.app_name, user_id=KEY.user_id, session_id=KEY.session_id, filter_key="",
                       summary=applied, served_epoch=s.epoch)  # fmt: skip


class Fakes:
    """The client (its ``request_summary`` answer), the context reader and the read API (what Cassandra shows)."""

    def __init__(self, answer: SessionSummary, shown: SessionSummary) -> None:
        self.answer = answer
        self.shown = shown

    async def request_summary(self, *args: Any, **kwargs: Any) -> SessionSummary:
        return self.answer

    async def read(self, *args: Any, **kwargs: Any) -> ContextRead:
        return read_of(self.shown)

    async def latest_summary(self, key: SessionKey, filter_key: str) -> StoredSummary:
        s = self.shown
        return StoredSummary(filter_key=s.filter_key, version=s.version, summary=s.summary,
                             cutoff_at=s.boundary.cutoff_at, last_event_id=s.boundary.last_event_id,
                             created_at=s.created_at, record=s)  # fmt: skip


def agent(fakes: Fakes) -> DistillAgent:
    backend = SessionBackend(Settings(), client=fakes, reader=fakes, context=fakes)  # type: ignore[arg-type]
    return DistillAgent(backend, app_name=KEY.app_name, user_id=KEY.user_id, session_id=KEY.session_id,
                        projection_wait_s=0.3)  # fmt: skip


async def test_after_a_switch_to_a_line_with_lower_versions_the_facade_reads_the_served_head() -> None:
    fakes = Fakes(answer=summary(0, 7, "live v7"), shown=summary(0, 7, "live v7"))
    facade = agent(fakes)
    assert (await facade.summarize()) == fakes.answer
    fakes.shown = summary(1, 3, "epoch one v3")  # the switch, projected: the served line is at v3
    read = await facade.read()
    assert read.summary is not None and (read.summary.epoch, read.summary.summary) == (1, "epoch one v3")


async def test_on_one_epoch_the_facade_still_waits_for_the_summary_it_was_answered_with() -> None:
    fakes = Fakes(answer=summary(1, 4, "epoch one v4"), shown=summary(1, 3, "epoch one v3"))
    facade = agent(fakes)
    await facade.summarize()
    with pytest.raises(ProjectionBehindError) as behind:
        await facade.read()
    assert behind.value.missing == ("summary v4 of epoch 1",)


async def test_the_backend_serves_the_read_sides_epoch_not_a_received_summary_of_the_left_line() -> None:
    fakes = Fakes(answer=summary(0, 7, "live v7"), shown=summary(0, 6, "live v6"))
    backend = SessionBackend(Settings(), client=fakes, reader=fakes, context=fakes)  # type: ignore[arg-type]
    assert (await backend.summarize(KEY)) == fakes.answer  # received before the projector stored it
    fakes.shown = summary(1, 3, "epoch one v3")
    assert (await backend.latest_summary(KEY)) == fakes.shown
    applied = read_of(fakes.shown)
    assert (await backend._applied_record(KEY, "", applied.summary, applied.served_epoch)) == fakes.shown
