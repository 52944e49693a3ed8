"""The facade waits for its own events by log position, not by stamp.

Another producer's clock runs ahead: a summary made while this facade publishes has a boundary event
logged *before* the facade's new message but stamped *after* it. The read side shows that message (it
is logged after the boundary event); until the projector has written it, the facade must wait for it
rather than take its early stamp for "summarized" — else the very next request lacks the user's
message. The fake holds Cassandra's rules: log order, the cut after the boundary event, and a
projector that writes the newest records a read late.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from projections.boundary import Cut
from projections.context_read import applicable_summary
from schemas import Message, SessionEvent, SessionKey, SessionSummary
from schemas.reads import ContextRead
from schemas.settings import Settings
from streams.adapters.backend import SessionBackend
from streams.agent.facade import DistillAgent
from tests.unit.agent.test_facade_clock import LogAndCut
from tests.unit.context.sessions import summary_at

KEY = SessionKey("app", "u1", "s1")


def other(n: int, at: datetime, role: str = "user") -> SessionEvent:
    """An event of another producer of the session (its own clock)."""
    return SessionEvent(app_name=KEY.app_name, user_id=KEY.user_id, session_id=KEY.session_id, event_id=f"o{n}",
                        timestamp=at, author="user" if role == "user" else "agent",
                        message=Message(role=role, content=f"别处的消息 标记o{n}"), request_id=f"o{n}",
                        invocation_id=f"o{n}")  # fmt: skip


class LaggingProjection(LogAndCut):
    """The client (a list for the log) and ``ContextReader.read`` (log order, cut after the boundary event);
    the records logged after ``hold_from`` are not projected until one read has missed them."""

    def __init__(self, events: list[SessionEvent], summary: SessionSummary) -> None:
        super().__init__(events, summary)
        self.hold_from: int | None = None
        self.reads = 0

    async def read(
        self, key: SessionKey, filter_key: str = "", *, current_event_id: str | None = None, full_history: bool = False
    ) -> ContextRead:
        self.reads += 1
        projected = self.log if self.hold_from is None else self.log[: self.hold_from]
        self.hold_from = None  # the next read finds them written
        applied = applicable_summary([self.summary], filter_key)
        assert applied is not None
        anchor = next(((e.timestamp, seq) for seq, e in enumerate(projected)
                       if e.event_id == applied.boundary.last_event_id), None)  # fmt: skip
        cut = Cut.of(applied.boundary.cutoff_at, anchor)
        shown = [e for seq, e in enumerate(projected) if full_history or cut.is_after(e.timestamp, seq)]
        users = [e for e in shown if e.message.role == "user"]
        return ContextRead(
            app_name=key.app_name, user_id=key.user_id, session_id=key.session_id, filter_key=filter_key,
            summary=applied, events=tuple(shown), full_history=full_history, boundary_seq=cut.anchor_seq,
            current_event_id=users[-1].event_id if users else None,
        )  # fmt: skip


def facade_over(first: SessionEvent) -> tuple[LaggingProjection, DistillAgent]:
    """A facade over a session holding ``first`` and a summary up to it."""
    fake = LaggingProjection([first], summary_at(first, "早先的摘要"))
    backend = SessionBackend(Settings(), client=fake, reader=fake, context=fake)  # type: ignore[arg-type]
    return fake, DistillAgent(backend, app_name=KEY.app_name, user_id=KEY.user_id, session_id=KEY.session_id,
                              projection_wait_s=5.0)  # fmt: skip


async def test_a_message_logged_after_a_boundary_stamped_ahead_of_it_is_waited_for_and_shown() -> None:
    now = datetime.now(UTC)
    fake, agent = facade_over(other(0, now - timedelta(seconds=30)))
    await agent.next_request("sys")  # the facade has seen the summary of o0
    # Meanwhile another producer, its clock 60 s ahead, logs o1; a summary up to o1 is made.
    ahead = other(1, now + timedelta(seconds=60), role="assistant")
    fake.log.append(ahead)
    fake.summary = summary_at(ahead, "新的摘要 标记o0 标记o1")
    mine = await agent.user("明天的航班改到下午 标记m1")
    assert mine.timestamp < ahead.timestamp  # stamped before the new cutoff, logged after its boundary event
    fake.hold_from = len(fake.log) - 1  # the projector has not written it yet at the next read
    request = await agent.next_request("sys")
    text = str(request.messages)
    assert "标记m1" in text and "新的摘要" in text, text
    assert fake.reads >= 3  # the read that missed it was not taken


async def test_without_the_boundary_position_the_stamp_still_decides() -> None:
    first = other(0, datetime.now(UTC) - timedelta(seconds=30))
    _, agent = facade_over(first)
    mine = await agent.user("第一个问题 标记m1")
    request = await agent.next_request("sys")
    assert "标记m1" in str(request.messages) and mine.timestamp > first.timestamp
