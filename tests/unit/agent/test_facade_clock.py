"""A fresh facade stamps its first event after the summary's cutoff, even when the read holds no event.

Another producer's clock ran ahead: the summary covers everything and its cutoff is later than this
process's clock. The read side orders and cuts by time, so a user message stamped before the cutoff
would be missing from the very next request (a summary covers every stored event: the read's event
list is empty, and the floor came from events only). The fake holds Cassandra's cut rule.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

import pytest

from projections.boundary import Cut
from projections.context_read import applicable_summary
from schemas import Message, SessionEvent, SessionKey, SessionSummary
from schemas.reads import ContextRead
from schemas.settings import Settings
from streams.adapters.backend import SessionBackend
from streams.agent.facade import DistillAgent
from tests.unit.context.sessions import summary_at

KEY = SessionKey("app", "u1", "s1")


class LogAndCut:
    """The client (a list for a log) and ``ContextReader.read`` (stored order, cut by the boundary)."""

    def __init__(self, events: list[SessionEvent], summary: SessionSummary) -> None:
        self.log = list(events)
        self.summary = summary

    async def publish_logged(self, records: Iterable[SessionEvent], encoded: object = None) -> list[int]:
        start = len(self.log)
        self.log.extend(records)
        return list(range(start, len(self.log)))

    async def read(
        self, key: SessionKey, filter_key: str = "", *, current_event_id: str | None = None, full_history: bool = False
    ) -> ContextRead:
        applied = applicable_summary([self.summary], filter_key)
        assert applied is not None
        rows = sorted(((e.timestamp, seq, e) for seq, e in enumerate(self.log)), key=lambda r: (r[0], r[1]))
        anchor = next(((ts, seq) for ts, seq, e in rows if e.event_id == applied.boundary.last_event_id), None)
        cut = Cut.of(applied.boundary.cutoff_at, anchor)
        shown = [e for ts, seq, e in rows if full_history or cut.is_after(ts, seq)]
        users = [e for e in shown if e.message.role == "user"]
        return ContextRead(
            app_name=key.app_name, user_id=key.user_id, session_id=key.session_id, filter_key=filter_key,
            summary=applied, events=tuple(shown), full_history=full_history,
            current_event_id=users[-1].event_id if users else None,
        )  # fmt: skip


async def test_a_fresh_facade_stamps_after_a_cutoff_set_by_a_clock_ahead_of_its_own() -> None:
    ahead = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)
    old = [
        SessionEvent(app_name=KEY.app_name, user_id=KEY.user_id, session_id=KEY.session_id, event_id=f"e{n}",
                     timestamp=ahead + timedelta(milliseconds=n), author="user" if n == 0 else "agent",
                     message=Message(role="user" if n == 0 else "assistant", content=f"旧的消息 标记{n}"),
                     request_id="r0", invocation_id="r0")
        for n in range(2)
    ]  # fmt: skip
    fake = LogAndCut(old, summary_at(old[-1], "之前的摘要"))
    backend = SessionBackend(Settings(), client=fake, reader=fake, context=fake)  # type: ignore[arg-type]
    agent = DistillAgent(backend, app_name=KEY.app_name, user_id=KEY.user_id, session_id=KEY.session_id)
    event = await agent.user("新的问题 标记9")
    assert event.timestamp > old[-1].timestamp
    request = await agent.next_request("sys")
    text = str(request.messages)
    assert "之前的摘要" in text and "标记9" in text, text


async def test_tool_results_produced_before_a_cancellation_are_published() -> None:
    """The run is cancelled while its second tool runs: the first tool's result (its side effects done)
    is still published, so the next request shows it."""
    ahead = datetime.now(UTC) - timedelta(seconds=5)
    first = SessionEvent(app_name=KEY.app_name, user_id=KEY.user_id, session_id=KEY.session_id, event_id="e0",
                         timestamp=ahead, author="user", message=Message(role="user", content="查一下航班 标记0"),
                         request_id="r0", invocation_id="r0")  # fmt: skip
    fake = LogAndCut([first], summary_at(first, "空"))
    backend = SessionBackend(Settings(), client=fake, reader=fake, context=fake)  # type: ignore[arg-type]
    agent = DistillAgent(backend, app_name=KEY.app_name, user_id=KEY.user_id, session_id=KEY.session_id)
    await agent.user("订两张票 标记1")
    reply = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "book", "arguments": "{}"}},
        {"id": "c2", "type": "function", "function": {"name": "pay", "arguments": "{}"}},
    ]}  # fmt: skip
    await agent.record(reply)

    async def pay() -> str:
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await agent.run_tools(reply, {"book": lambda: "已订 CA1234 标记2", "pay": pay})
    assert any("标记2" in str(e.message.content) for e in fake.log), [e.message for e in fake.log]
