"""The trpc session service's windows never drop distill's summary anchor.

trpc trims a session's events to its ``SessionServiceConfig`` (``num_recent_events`` and
``event_ttl_seconds`` when a session is read, ``max_events`` when an event is appended),
keeping the newest. distill's summary event is the only copy of what lies before its
boundary and comes first, stamped at the boundary's cutoff — older than every event it
stands before —, so every window would drop it first. The window is the framework's to
keep; the summary stays in front of what it keeps (as ``get_items(limit)`` does).
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta

import pytest

from schemas import SessionEvent, SessionKey
from schemas.settings import Settings
from streams.adapters.backend import SessionBackend
from tests.unit.adapters.log_store import LogStore
from tests.unit.adapters.test_backend_view import echo_summary
from tests.unit.context.oracle import marker
from tests.unit.context.sessions import Session

pytest.importorskip("trpc_agent_sdk.events", exc_type=ImportError)
from trpc_agent_sdk.events import Event
from trpc_agent_sdk.sessions import SessionServiceConfig
from trpc_agent_sdk.types import Content, Part

from streams.adapters.trpc_session import DistillSessionService

KEY = SessionKey("app", "u1", "s1")


def _markers(text: str) -> set[str]:
    return set(re.findall(r"标记\d{4}号", text))


def _store(start: datetime) -> tuple[LogStore, list[SessionEvent]]:
    """Three rounds stamped a minute apart from ``start``; a summary of the first, projected."""
    s = Session()
    for r in range(3):
        s.turn(f"r{r}").user(f"第{r}轮问题 {marker(2 * r + 1)}")
        s.answer(f"第{r}轮回答 {marker(2 * r + 2)}")
    events = [e.model_copy(update={"timestamp": start + timedelta(minutes=i)}) for i, e in enumerate(s.events)]
    store = LogStore()
    store.append(*events, echo_summary(events, events[1]))
    store.project()
    return store, events


def _service(store: LogStore, config: SessionServiceConfig) -> DistillSessionService:
    backend = SessionBackend(Settings(), client=store, reader=store, context=store)  # type: ignore[arg-type]
    return DistillSessionService(backend=backend, session_config=config)


def _text(events: list[Event]) -> str:
    return " ".join(p.text or "" for e in events if e.content for p in e.content.parts or [])


@pytest.mark.parametrize(
    "config",
    [SessionServiceConfig(num_recent_events=2), SessionServiceConfig(event_ttl_seconds=150)],
    ids=["num_recent_events", "event_ttl_seconds"],
)
async def test_a_trimmed_session_keeps_the_summary_in_front(config: SessionServiceConfig) -> None:
    store, _ = _store(datetime.now(UTC) - timedelta(minutes=5, seconds=30))
    service = _service(store, config)
    session = await service.get_session(app_name=KEY.app_name, user_id=KEY.user_id, session_id=KEY.session_id)
    assert session is not None
    assert session.events[0].is_summary_event(), "the summary is the only copy of the first round"
    assert {marker(1), marker(2)} <= _markers(_text(session.events))
    assert marker(6) in _text(session.events[-1:])  # the window itself is the framework's: the newest kept


async def test_an_append_that_trims_the_running_session_keeps_the_summary_in_front() -> None:
    store, _ = _store(datetime.now(UTC) - timedelta(minutes=10))
    service = _service(store, SessionServiceConfig(max_events=3))
    session = await service.get_session(app_name=KEY.app_name, user_id=KEY.user_id, session_id=KEY.session_id)
    assert session is not None and session.events[0].is_summary_event()
    event = Event(invocation_id="i9", author="user", timestamp=time.time(),
                  content=Content(role="user", parts=[Part.from_text(text=f"新问题 {marker(9)}")]))  # fmt: skip
    await service.append_event(session, event)
    assert session.events[0].is_summary_event(), "the running invocation's next request needs the summary"
    assert {marker(1), marker(2), marker(9)} <= _markers(_text(session.events))
