"""The facade counts a late event as after the boundary: an over-budget request of late events forces a summary.

A late event (logged after the boundary event, stamped before the cutoff) is not in the summary: the
next pass takes it. When the request must shrink, the facade asks for that pass before dropping rounds
— only when the read holds events after the boundary, which it decided by timestamp and so took the
late events for covered ones: no summary was asked for and rounds no summary holds were dropped.
Fakes stand for Kafka and Cassandra (no service).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from projections.context_read import applicable_summary
from schemas import SessionKey
from schemas.reads import ContextRead
from schemas.settings import Settings
from streams.adapters.backend import SessionBackend
from streams.agent.facade import DistillAgent
from tests.unit.context.oracle import marker, unaccounted
from tests.unit.context.sessions import Session, summary_at

KEY = SessionKey("app", "u1", "s1")
SHORT = "我们讨论了明天去杭州的行程安排，包括高铁车次。"
"""Below every payload cut's threshold: only a summary, or dropped rounds, can make many such rounds fit."""


class Fakes:
    """The context reader (one read) and the client (records what it was asked)."""

    def __init__(self, read: ContextRead) -> None:
        self.answer = read
        self.asked: list[bool] = []

    async def read(self, *args: Any, **kwargs: Any) -> ContextRead:
        return self.answer

    async def request_summary(self, key: SessionKey, filter_key: str, *, force: bool, timeout: float) -> None:
        self.asked.append(force)
        return None  # nothing summarized: the request is built as it is


async def test_an_over_budget_request_of_late_events_forces_a_summary() -> None:
    s = Session()
    s.turn("r1").user(f"第一轮 {marker(1)}")
    boundary = s.answer(f"好的 {marker(2)}")
    for r in range(2, 90):
        s.turn(f"r{r}").user(f"{marker(2 * r - 1)} {SHORT}")
        s.answer(f"{marker(2 * r)} {SHORT}")
    # Stamped before the cutoff (a producer's clock behind), logged after the boundary event.
    late = [e.model_copy(update={"timestamp": e.timestamp - timedelta(hours=1)}) for e in s.events[2:]]
    summary = summary_at(boundary, f"摘要 {marker(1)} {marker(2)}")
    applied = applicable_summary([summary], "")
    assert applied is not None and all(e.timestamp < summary.boundary.cutoff_at for e in late)
    read = ContextRead(app_name=KEY.app_name, user_id=KEY.user_id, session_id=KEY.session_id, filter_key="",
                       summary=applied, events=(boundary, *late), current_event_id=late[-2].event_id)  # fmt: skip
    fakes = Fakes(read)
    backend = SessionBackend(Settings(), client=fakes, reader=fakes, context=fakes)  # type: ignore[arg-type]
    agent = DistillAgent(backend, app_name=KEY.app_name, user_id=KEY.user_id, session_id=KEY.session_id,
                         projection_wait_s=0.3, context_window=4096)  # fmt: skip
    request = await agent.next_request("你是旅行助手。")
    assert fakes.asked == [True], "the late rounds are after the boundary: a summary is asked for before dropping"
    assert request.report.tailored_messages > 0  # none came (the fake summarizes nothing): then rounds go
    assert unaccounted(request.messages, late) == []  # and the request names them
