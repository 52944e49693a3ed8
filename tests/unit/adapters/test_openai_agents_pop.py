"""``DistillSession.pop_item`` takes back exactly one item, as the SDK's ``SQLiteSession`` does.

An event another producer published (a chat message, no native item) may stand
for several items: an assistant message with text and two tool calls is three.
Popping must take back its last item only and keep the others in ``get_items``
(before, the whole event left the view while one item came back: the others were
hidden without a word until the next summary). The reference is the real SDK's
``SQLiteSession`` given the same items; Kafka and Cassandra are a log in memory.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime

import pytest
from agents import SQLiteSession
from agents.items import TResponseInputItem
from pydantic import TypeAdapter

from schemas import SessionEvent, SessionKey
from schemas.settings import Settings
from streams.adapters.backend import SessionBackend
from streams.adapters.openai_agents_session import DistillSession
from streams.context.compaction import CompactionConfig
from tests.unit.adapters.log_store import LogStore
from tests.unit.context.sessions import Session

KEY = SessionKey("app", "u1", "s1")
ITEM = TypeAdapter(TResponseInputItem)


def _call(call_id: str, name: str, arguments: str) -> dict[str, object]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _other_producers_session() -> Session:
    s = Session()
    s.turn("r1").user("帮我查一下上海和北京明天的天气。")
    s.add("assistant", content="我来查两个城市。🙂", tool_calls=[_call("c1", "weather", '{"city": "上海"}'),
                                                               _call("c2", "weather", '{"city": "北京"}')])  # fmt: skip
    s.result("c1", "小雨 12 度")
    s.result("c2", "晴 8 度")
    s.answer("上海小雨，北京晴。")
    s.add("assistant", content="还要别的吗？", tool_calls=[_call("c3", "notes", "{}")])
    return s


async def _pair() -> tuple[DistillSession, SQLiteSession, LogStore]:
    store = LogStore()
    store.append(*_other_producers_session().events)
    store.project()
    backend = SessionBackend(Settings(), client=store, reader=store, context=store)  # type: ignore[arg-type]
    ours = DistillSession("s1", backend, app_name=KEY.app_name, user_id=KEY.user_id,
                          compaction=CompactionConfig(enabled=False))  # fmt: skip
    ref = SQLiteSession("s1")
    await ref.add_items(copy.deepcopy(await ours.get_items()))
    return ours, ref, store


@pytest.mark.parametrize("projected", [True, False], ids=["projected", "pending"])
async def test_pop_item_takes_back_one_item_and_keeps_the_rest_of_its_event(projected: bool) -> None:
    ours, ref, store = await _pair()
    assert len(await ours.get_items()) == 9  # user; text + 2 calls; 2 outputs; answer; text + 1 call
    while True:
        popped, expected = await ours.pop_item(), await ref.pop_item()
        assert popped == expected
        if popped is None:
            break
        ITEM.validate_python(popped)  # a Responses-API input item the SDK accepts
        if projected:
            store.project()
        assert await ours.get_items() == await ref.get_items()
    assert await ours.get_items() == []
    ref.close()


async def test_a_popped_call_leaves_its_text_and_sibling_call_visible() -> None:
    ours, ref, _ = await _pair()
    for _ in range(4):  # the last event's call and text, the answer, then c2's output
        await ours.pop_item()
    await ours.pop_item()  # c1's output
    call = await ours.pop_item()
    assert call is not None and call["type"] == "function_call" and call["call_id"] == "c2"
    items = await ours.get_items()
    assert [i.get("call_id") for i in items if i.get("type") == "function_call"] == ["c1"]
    assert items[1] == {"role": "assistant", "content": "我来查两个城市。🙂"}
    assert json.loads(items[-1]["arguments"]) == {"city": "上海"}
    ref.close()


def _marker(n: int, **fields: object) -> SessionEvent:
    return SessionEvent.model_validate(
        {"app_name": KEY.app_name, "user_id": KEY.user_id, "session_id": KEY.session_id, "event_id": f"m{n}",
         "timestamp": datetime(2026, 1, 2, 0, 0, n, tzinfo=UTC), "author": "distill",
         "message": {"role": "system", "content": None}, "skip_summarization": True, **fields}
    )  # fmt: skip


async def test_the_marker_pop_item_writes_hides_nothing_from_a_build_that_reads_retracts_as_the_whole_event() -> None:
    # Such a build took ``retracts`` for "the whole event": given a marker of one item in that field, it would
    # hide the event's other items (text and a sibling call) from its agents' requests, without a word.
    ours, _, store = await _pair()
    for _ in range(3):  # the last event's call and text, then the answer
        await ours.pop_item()
    markers = [r for r in store.log if isinstance(r, SessionEvent) and r.author == "distill"]
    assert len(markers) == 3
    for marker in markers:
        extra = marker.model_extra or {}
        assert "retracts" not in extra
        assert isinstance(extra["retracts_item_of"], str) and isinstance(extra["retracts_item"], int)


async def test_markers_of_earlier_builds_still_take_back_what_they_named() -> None:
    ours, _, store = await _pair()
    events = _other_producers_session().events
    calls_event, answer = events[1], events[4]  # text + calls c1, c2; "上海小雨，北京晴。"
    store.append(
        _marker(1, retracts=calls_event.event_id, retracts_item=2),  # an item (the builds before this one)
        _marker(2, retracts=answer.event_id),  # the whole event (the first builds)
    )
    store.project()
    items = await ours.get_items()
    assert [i.get("call_id") for i in items if i.get("type") == "function_call"] == ["c1", "c3"]
    assert {"role": "assistant", "content": "我来查两个城市。🙂"} in items
    assert not any(i.get("content") == "上海小雨，北京晴。" for i in items)
    assert len(items) == 7


async def test_an_item_marker_without_its_index_takes_back_nothing() -> None:
    ours, _, store = await _pair()
    before = await ours.get_items()
    store.append(_marker(1, retracts_item_of=_other_producers_session().events[1].event_id))
    store.project()
    assert await ours.get_items() == before
