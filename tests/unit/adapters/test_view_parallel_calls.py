"""A summary landing between the results of parallel calls leaves no call without its result in a view.

An assistant event makes calls ``c1`` and ``c2``; a summary's boundary falls after ``c1``'s result
and before ``c2``'s (a forced summary, the idle sweep). The view keeps the covered call event for
``c2``'s result, which lies after the boundary; it used to keep it whole, ``c1`` included, whose
result the boundary covers: the frameworks replay the view as it is, and the provider refuses a
call without its result (every request of the session, until a summary covers ``c2`` too). The
event is now shown as ``c2`` alone, as ``streams.context.history.project_history`` restores it:
its text and ``c1`` are the summary's. Oracle: the requests the adapters' histories give pass
``find_violations``, and every event's marker is in the summary or the view. Kafka and Cassandra
are a log in memory.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import re
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas import SessionEvent, SessionKey
from schemas.reads import ContextRead
from schemas.settings import Settings
from streams.adapters.backend import SessionBackend, SessionView
from streams.adapters.native import Clock
from streams.context.validity import find_violations
from tests.unit.adapters.log_store import LogStore
from tests.unit.adapters.test_backend_view import echo_summary, unaccounted
from tests.unit.context.oracle import marker
from tests.unit.context.sessions import Session

pytest.importorskip("trpc_agent_sdk.events", exc_type=ImportError)
pytest.importorskip("agents")
from agents import SQLiteSession
from agents.models.chatcmpl_converter import Converter
from trpc_agent_sdk.events import Event
from trpc_agent_sdk.types import Content, FunctionCall, FunctionResponse, Part

from streams.adapters.openai_agents_session import DistillSession
from streams.adapters.trpc_events import to_session_events
from streams.adapters.trpc_session import DistillSessionService
from streams.context.compaction import CompactionConfig

KEY = SessionKey("app", "u1", "s1")


def _call(call_id: str, city: str) -> dict[str, object]:
    return {"id": call_id, "type": "function", "function": {"name": "weather", "arguments": json.dumps({"city": city})}}


def _chat_events() -> list[SessionEvent]:
    """Another producer's chat events: a user turn, two parallel calls with text, their results, an answer."""
    s = Session()
    s.turn("r1").user(f"上海和北京明天天气如何？{marker(1)}")
    s.add("assistant", content=f"我来查两个城市。{marker(2)}", tool_calls=[_call("c1", "上海"), _call("c2", "北京")])
    s.result("c1", f"小雨 12 度 {marker(3)}")
    s.result("c2", f"晴 8 度 {marker(4)}")
    s.answer(f"上海小雨，北京晴。{marker(5)}")
    return s.events


def _trpc_events() -> list[SessionEvent]:
    """The same conversation written by trpc: its tool event holds both responses (split into two pieces)."""
    clock = Clock()
    t = datetime(2026, 1, 1, tzinfo=UTC).timestamp()

    def event(n: int, author: str, role: str, *parts: Part) -> Event:
        return Event(id=f"t{n}", invocation_id="i1", author=author, timestamp=t + n,
                     content=Content(role=role, parts=list(parts)))  # fmt: skip

    def fc(call_id: str, city: str) -> Part:
        return Part(function_call=FunctionCall(id=call_id, name="weather", args={"city": city}))

    def fr(call_id: str, text: str) -> Part:
        return Part(function_response=FunctionResponse(id=call_id, name="weather", response={"result": text}))

    records = [
        event(1, "user", "user", Part.from_text(text=f"上海和北京明天天气如何？{marker(1)}")),
        event(2, "assistant", "model", Part.from_text(text=f"我来查两个城市。{marker(2)}"), fc("c1", "上海"),
              fc("c2", "北京")),
        event(3, "assistant", "user", fr("c1", f"小雨 12 度 {marker(3)}"), fr("c2", f"晴 8 度 {marker(4)}")),
        event(4, "assistant", "model", Part.from_text(text=f"上海小雨，北京晴。{marker(5)}")),
    ]  # fmt: skip
    return [e for record in records for e in to_session_events(record, KEY, clock)]


class CallsStore(LogStore):
    """A read shaped like ``ContextReader``'s: also the covered call event of each tail tool result whose call
    is not in the tail (its step 5, *late results*), in log order."""

    async def read(self, key: SessionKey, filter_key: str = "", **kwargs: Any) -> ContextRead:
        read = await super().read(key, filter_key, **kwargs)
        tail = {e.event_id for e in read.events}
        made = {c.id for e in read.events for c in e.message.tool_calls}
        wanted = {e.message.tool_call_id for e in read.events if e.message.tool_call_id} - made
        logged = [r for r in self.log[: self.projected] if isinstance(r, SessionEvent)]
        calls = {e.event_id for e in logged if any(c.id in wanted for c in e.message.tool_calls)}
        events = tuple(e for e in logged if e.event_id in tail | calls)
        return read.model_copy(update={"events": events})


def _store(events: list[SessionEvent]) -> LogStore:
    """``events`` and a summary whose boundary is ``c1``'s result (covering the call event), projected."""
    c1 = next(e for e in events if e.message.tool_call_id == "c1")
    store = CallsStore()
    store.append(*events, echo_summary(events, c1))
    store.project()
    return store


def _backend(store: LogStore) -> SessionBackend:
    return SessionBackend(Settings(), client=store, reader=store, context=store)  # type: ignore[arg-type]


def _chat(view: SessionView) -> list[dict[str, Any]]:
    """The view as chat messages, each event as the view shows it."""
    out: list[dict[str, Any]] = []
    for event in map(view.shown, view.events):
        message = event.message.model_dump(mode="json", exclude_none=True)
        out.append({k: v for k, v in message.items() if v not in ((), [])})
    return out


def _trpc_chat(events: list[Event]) -> list[dict[str, Any]]:
    """trpc events as the chat-completions messages a model request is built of (calls, results, texts)."""
    out: list[dict[str, Any]] = []
    for event in events:
        parts = list(event.content.parts or []) if event.content is not None else []
        text = "".join(p.text or "" for p in parts if p.text)
        calls = [{"id": p.function_call.id, "type": "function", "function": {"name": p.function_call.name,
                  "arguments": json.dumps(p.function_call.args)}} for p in parts if p.function_call]  # fmt: skip
        role = "user" if event.content is not None and event.content.role == "user" else "assistant"
        if text or calls:
            out.append({"role": role, "content": text or None, **({"tool_calls": calls} if calls else {})})
        out.extend({"role": "tool", "tool_call_id": p.function_response.id, "content": "…"}
                   for p in parts if p.function_response)  # fmt: skip
    return out


def _markers(text: str) -> set[str]:
    return set(re.findall(r"标记\d{4}号", text))


@pytest.mark.parametrize("events", [_chat_events(), _trpc_events()], ids=["chat", "trpc"])
async def test_the_view_shows_the_covered_call_event_for_the_answered_call_alone(events: list[SessionEvent]) -> None:
    view = await _backend(_store(events)).view(KEY)
    calls_event = next(e for e in events if e.message.tool_calls)
    assert view.calls_only == {calls_event.event_id: frozenset({"c2"})}
    assert find_violations(_chat(view)) == []
    assert unaccounted(view, events) == [], "the call event's text and c1 are in the summary, the rest in the view"


@pytest.mark.parametrize("events", [_chat_events(), _trpc_events()], ids=["chat", "trpc"])
async def test_a_trpc_session_replays_no_call_without_its_result(events: list[SessionEvent]) -> None:
    service = DistillSessionService(backend=_backend(_store(events)))
    session = await service.get_session(app_name=KEY.app_name, user_id=KEY.user_id, session_id=KEY.session_id)
    assert session is not None and session.events[0].is_summary_event()
    assert find_violations(_trpc_chat(session.events[1:])) == []
    shown = " ".join(json.dumps(e.model_dump(mode="json"), ensure_ascii=False) for e in session.events)
    assert {marker(n) for n in range(1, 6)} <= _markers(shown)
    calls = [p.function_call.id for e in session.events if e.content for p in e.content.parts or [] if p.function_call]
    assert calls == ["c2"]


async def test_an_agents_session_replays_no_call_without_its_result() -> None:
    events = _chat_events()
    session = DistillSession("s1", _backend(_store(events)), app_name="app", user_id="u1",
                             compaction=CompactionConfig(enabled=False))  # fmt: skip
    items = await session.get_items()
    assert find_violations(Converter.items_to_messages(items)) == []
    assert {marker(n) for n in range(1, 6)} <= _markers(json.dumps(items, ensure_ascii=False))
    assert [i["call_id"] for i in items if i.get("type") == "function_call"] == ["c2"]


async def test_pop_item_on_a_reduced_call_event_takes_back_the_item_it_returns() -> None:
    """``pop_item``'s marker records the item's index among the whole event's items (text, c1, c2: c2 is 2),
    so the next view takes back ``c2`` and not the event's text (index 0 of the items it shows)."""
    store = _store(_chat_events())
    ours = DistillSession("s1", _backend(store), app_name="app", user_id="u1",
                          compaction=CompactionConfig(enabled=False))  # fmt: skip
    ref = SQLiteSession("s1")
    head, *items = await ours.get_items()  # the summary item, which pop_item never takes back
    assert [i.get("call_id") for i in items if i.get("type") == "function_call"] == ["c2"]
    await ref.add_items(copy.deepcopy(items))
    while True:
        popped, expected = await ours.pop_item(), await ref.pop_item()
        assert popped == expected
        if popped is None:
            break
        store.project()
        assert await ours.get_items() == [head, *await ref.get_items()]
    ref.close()


async def test_an_item_popped_before_the_summary_stays_taken_back_from_the_reduced_event() -> None:
    """Popped while the call event was whole (text, c1, c2: ``c2`` is item 2), then a summary lands between the
    results: the event is shown as ``c2`` alone, and ``c2`` stays taken back (its result was popped too)."""
    events = _chat_events()
    store = CallsStore()
    store.append(*events)
    store.project()
    ours = DistillSession("s1", _backend(store), app_name="app", user_id="u1",
                          compaction=CompactionConfig(enabled=False))  # fmt: skip
    popped = [await ours.pop_item() for _ in range(4)]  # the answer, c2's result, c1's result, then c2's call
    assert popped[-1] is not None and popped[-1].get("call_id") == "c2"
    c1 = next(e for e in events if e.message.tool_call_id == "c1")
    store.append(echo_summary(events, c1))
    store.project()
    items = await ours.get_items()
    assert not any(i.get("call_id") == "c2" for i in items), "the popped call is back"
    assert find_violations(Converter.items_to_messages(items)) == []


@st.composite
def _parallel_sessions(draw: st.DrawFn) -> list[SessionEvent]:
    """Rounds of parallel calls whose results come in any order, some never."""
    s = Session()
    n = 0

    def mark() -> str:
        nonlocal n
        n += 1
        return marker(n)

    for r in range(draw(st.integers(1, 4))):
        s.turn(f"r{r}").user(f"问题 {mark()}")
        ids = [f"c{r}_{c}" for c in range(draw(st.integers(1, 3)))]
        s.add("assistant", content=draw(st.sampled_from([None, f"我来查 {mark()}"])),
              tool_calls=[_call(i, mark()) for i in ids])  # fmt: skip
        for i in draw(st.permutations(ids)):
            if draw(st.integers(0, 4)):
                s.result(i, f"结果 {mark()}")
        if draw(st.booleans()):
            s.answer(f"回答 {mark()}")
    return s.events


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(_parallel_sessions(), st.data())
def test_any_boundary_leaves_no_covered_call_without_its_result_in_the_view(
    events: list[SessionEvent], data: st.DataObject
) -> None:
    """Property: wherever the summary's boundary falls, each call the view shows of a covered event has its
    result in the view, and every event's marker is in the summary or the view."""
    boundary = data.draw(st.sampled_from(events))
    store = CallsStore()
    store.append(*events, echo_summary(events, boundary))
    store.project()
    view = asyncio.run(_backend(store).view(KEY))
    results = {e.message.tool_call_id for e in view.events if e.message.tool_call_id}
    for event_id in view.calls_only:
        shown = view.shown(next(e for e in view.events if e.event_id == event_id))
        assert shown.message.tool_calls and {c.id for c in shown.message.tool_calls} <= results
    as_shown = dataclasses.replace(view, events=tuple(map(view.shown, view.events)), calls_only={})
    assert unaccounted(as_shown, events) == []
