"""A session view whose read stopped at its event cap says so: on the view, in the log, in the adapters.

Without a summary the context read returns the newest ``max_events`` events and sets
``stats.truncated``; the view used to drop that flag, so an adapter's history silently
started somewhere in the middle. Kafka and Cassandra are a log in memory.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from schemas import SessionEvent, SessionKey
from schemas.reads import ContextRead, ReadStats
from schemas.settings import Settings
from streams.adapters.backend import SessionBackend
from streams.context.from_read import READ_CAP_MARK
from tests.unit.adapters.log_store import LogStore
from tests.unit.context.oracle import marker
from tests.unit.context.sessions import Session

pytest.importorskip("trpc_agent_sdk.events", exc_type=ImportError)
from streams.adapters.openai_agents_session import DistillSession
from streams.adapters.trpc_session import TRUNCATED_STATE_KEY, DistillSessionService

KEY = SessionKey("app", "u1", "s1")


class CappedStore(LogStore):
    """The read side with ``ContextReader.max_events``: the newest ``cap`` events, then ``stats.truncated``."""

    def __init__(self, cap: int) -> None:
        super().__init__()
        self.cap = cap

    async def read(self, key: SessionKey, filter_key: str = "", **kwargs: Any) -> ContextRead:
        read = await super().read(key, filter_key, **kwargs)
        if len(read.events) <= self.cap:
            return read
        return read.model_copy(update={"events": read.events[-self.cap :],
                                       "stats": ReadStats(queries=1, event_rows=self.cap, truncated=True)})  # fmt: skip


def _store(rounds: int, cap: int = 6) -> CappedStore:
    s = Session()
    for r in range(rounds):
        s.turn(f"r{r}").user(f"第{r}轮问题 {marker(2 * r + 1)}")
        s.answer(f"回答 {marker(2 * r + 2)}")
    store = CappedStore(cap)
    store.append(*s.events)
    store.project()
    return store


def _backend(store: LogStore) -> SessionBackend:
    return SessionBackend(Settings(), client=store, reader=store, context=store)  # type: ignore[arg-type]


@pytest.mark.parametrize(("rounds", "truncated"), [(2, False), (3, False), (10, True)])
async def test_the_view_says_when_its_read_stopped_at_the_cap(
    rounds: int, truncated: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="distill.adapters")
    view = await _backend(_store(rounds)).view(KEY)
    assert view.truncated is truncated
    assert len(view.events) == min(2 * rounds, 6) and view.stored_events == 2 * rounds
    warned = [r for r in caplog.records if "event cap" in r.getMessage()]
    assert bool(warned) is truncated
    assert all(getattr(r, "session_id", None) == "s1" for r in warned)


async def test_the_agents_session_keeps_the_flag_on_its_last_view() -> None:
    session = DistillSession("s1", _backend(_store(10)), app_name="app", user_id="u1")
    items = await session.get_items()
    assert len(items) == 7 and session.last_view is not None and session.last_view.truncated


async def test_the_agents_history_says_which_older_events_it_leaves_out() -> None:
    """The SDK replays ``get_items`` as the model's history: the note is in it, not only on ``last_view``."""
    session = DistillSession("s1", _backend(_store(10)), app_name="app", user_id="u1")
    note, *items = await session.get_items()
    assert note["role"] == "system" and str(note["content"]).startswith(READ_CAP_MARK)
    assert "before event_id=e15 " in note["content"] and len(items) == 6  # e15: the first event the read holds
    whole = DistillSession("s1", _backend(_store(3)), app_name="app", user_id="u1")
    assert READ_CAP_MARK not in str(await whole.get_items())
    popped = await session.pop_item()  # the note is no item of the session: pop_item takes back the newest event's
    assert popped is not None and READ_CAP_MARK not in str(popped)


async def test_the_trpc_history_says_which_older_events_it_leaves_out() -> None:
    store = _store(10)
    service = DistillSessionService(backend=_backend(store))
    session = await service.get_session(app_name="app", user_id="u1", session_id="s1")
    assert session is not None and session.events[0].is_summary_event()
    first = session.events[0].content.parts[0].text or ""
    assert first.startswith(READ_CAP_MARK) and "before event_id=e15 " in first
    assert session.events[0].timestamp < session.events[1].timestamp  # in front, whatever trpc's windows keep
    store.cap = 100
    again = await service.get_session(app_name="app", user_id="u1", session_id="s1")
    assert again is not None and READ_CAP_MARK not in str([e.model_dump() for e in again.events])


async def test_trpc_sessions_carry_the_flag_in_temp_state_never_stored() -> None:
    store = _store(10)
    service = DistillSessionService(backend=_backend(store))
    session = await service.get_session(app_name="app", user_id="u1", session_id="s1")
    assert session is not None and session.state.get(TRUNCATED_STATE_KEY) is True
    store.cap = 100  # the read is whole again: the flag goes
    again = await service.get_session(app_name="app", user_id="u1", session_id="s1")
    assert again is not None and TRUNCATED_STATE_KEY not in again.state


async def test_a_capped_view_after_a_summary_notes_it_in_the_summary_anchor() -> None:
    from streams.adapters.trpc_session import SUMMARY_PREFIX
    from tests.unit.adapters.test_backend_view import echo_summary

    store = _store(10)
    events = [r for r in store.log if isinstance(r, SessionEvent)]
    store.append(echo_summary(events, events[1]))  # covers the first round; 18 events after it, 6 read
    store.project()
    service = DistillSessionService(backend=_backend(store))
    session = await service.get_session(app_name="app", user_id="u1", session_id="s1")
    assert session is not None and session.events[0].is_summary_event()
    anchor = session.events[0].content.parts[0].text or ""
    assert anchor.startswith(SUMMARY_PREFIX) and marker(2) in anchor
    assert f"{READ_CAP_MARK}: " in anchor and "after the summary's boundary before event_id=e15 " in anchor
