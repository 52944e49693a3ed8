"""The recall executor answering session_search / session_load tool calls from real projected data."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from projections.errors import event_not_found
from schemas import FunctionCall, SessionKey, ToolCall
from schemas.settings import Settings
from streams.clients.recall_reader import CassandraRecallReader
from streams.context.recall_tools import HISTORICAL_NOTE, RecallExecutor
from tests.integration.test_projections_support import Store, close_store, event, open_store, summary

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="session")]

KEY = SessionKey("shop", "alice", "s1")
OTHER_SESSION = SessionKey("shop", "alice", "s2")
OTHER_USER = SessionKey("shop", "bob", "s9")
BIG = "".join(f"line {i:05d}: invoice ACME-{i} total {i * 3} EUR é中\n" for i in range(1500))  # ~60 KB, multibyte


@pytest_asyncio.fixture(loop_scope="session")
async def store(pooled_settings: Settings) -> AsyncIterator[Store]:
    s = open_store(pooled_settings)
    try:
        call = [{"id": "c1", "type": "function", "function": {"name": "fetch_invoices", "arguments": "{}"}}]
        await s.events(
            event(KEY, "e1", at=1, content="Please look up the invoices for ACME"),
            event(KEY, "e2", at=2, role="assistant", content=None, tool_calls=call),
            event(KEY, "e3", at=3, role="tool", content=BIG, tool_call_id="c1", name="fetch_invoices"),
            event(KEY, "e4", at=4, role="assistant", content="ACME has 1500 open invoices; the refund is pending"),
            event(KEY, "e5", at=5, content="Now book a flight to Paris"),
            event(KEY, "e6", at=6, role="assistant", content="Flight to Paris booked for Friday"),
            event(OTHER_SESSION, "o1", at=1, content="ACME refund escalated to finance"),
            event(OTHER_USER, "b1", at=1, content="ACME refund secret of another user"),
        )
        await s.summaries(summary(KEY, 1, text="Looked up ACME invoices.", cutoff=4, last_event_id="e4"))
        assert s.dead == []
        yield s
    finally:
        close_store(s)


def _executor(store: Store, key: SessionKey = KEY) -> RecallExecutor:
    return RecallExecutor(
        CassandraRecallReader(store.reader), app_name=key.app_name, user_id=key.user_id, session_id=key.session_id
    )


async def _call(executor: RecallExecutor, name: str, **args: Any) -> Any:
    message = await executor.execute(ToolCall(id="t1", function=FunctionCall(name=name, arguments=json.dumps(args))))
    assert message.role == "tool" and message.tool_call_id == "t1" and message.name == name
    return json.loads(message.content or "")


async def test_search_current_hidden_only_sees_what_the_summary_covers(store: Store) -> None:
    out = await _call(_executor(store), "session_search", query="ACME refund")
    assert out["historical_context"] is True and out["note"] == HISTORICAL_NOTE
    assert out["scope"] == "current_hidden" and out["results"]
    assert {r["session_id"] for r in out["results"]} == {"s1"}
    assert out["results"][0]["event_id"] == "e4"
    assert {r["event_id"] for r in out["results"]} <= {"e1", "e3", "e4"}
    best = out["results"][0]
    # The guide's hit fields: the best hits carry their window as context, its lines kept in the snippet.
    assert set(best) >= {"scope", "session_id", "event_id", "created", "role", "score", "snippet", "context",
                         "tool_call_id", "tool_name", "content_bytes", "content_truncated"}  # fmt: skip
    assert best["context"] and "[match] " in best["context"] and best["snippet"] == best["context"]
    assert "\n" in best["context"] and isinstance(best["content_bytes"], int)
    lexical = await _call(_executor(store), "session_search", query="ACME refund", search_mode="lexical")
    assert lexical["results"][0]["event_id"] == "e4"
    paris = await _call(_executor(store), "session_search", query="flight Paris")
    assert paris["results"] == []  # after the boundary: visible in the prompt, not hidden
    whole = await _call(_executor(store), "session_search", query="flight Paris", scope="current_session")
    assert {r["event_id"] for r in whole["results"]} >= {"e6"}


async def test_search_other_and_all_sessions_stay_inside_the_tenant(store: Store) -> None:
    others = await _call(_executor(store), "session_search", query="ACME refund", scope="other_sessions")
    assert [(r["session_id"], r["event_id"]) for r in others["results"]] == [("s2", "o1")]
    everything = await _call(_executor(store), "session_search", query="ACME refund", scope="all_sessions", top_k=10)
    found = {(r["session_id"], r["event_id"]) for r in everything["results"]}
    assert ("s2", "o1") in found and ("s1", "e4") in found
    assert all(r["session_id"] != "s9" and "another user" not in r["snippet"] for r in everything["results"])
    bob = await _call(_executor(store, OTHER_USER), "session_search", query="ACME refund", scope="all_sessions")
    assert bob["results"] == []  # bob's own session has no summary; alice's sessions are not his
    bob_now = await _call(_executor(store, OTHER_USER), "session_search", query="ACME", scope="current_session")
    assert [r["event_id"] for r in bob_now["results"]] == ["b1"]


async def test_load_by_tool_call_id_pages_through_a_large_result(store: Store) -> None:
    executor = _executor(store)
    first = await _call(executor, "session_load", tool_call_id="c1", before=1, after=1, content_limit=4096)
    assert first["anchor_event_id"] == "e3"
    assert [m["event_id"] for m in first["messages"]] == ["e1", "e3", "e4"]  # the tool-call event is skipped
    anchor = next(m for m in first["messages"] if m["anchor"])
    total = len(BIG.encode())
    assert anchor["tool_name"] == "fetch_invoices" and anchor["tool_call_id"] == "c1"
    assert (anchor["content_bytes"], anchor["content_offset"], anchor["content_truncated"]) == (total, 0, True)
    assert anchor["returned_bytes"] == len(anchor["content"].encode()) <= 4096
    assert BIG.startswith(anchor["content"])  # the raw text, no "fetch_invoices: " prefix
    # Page through the whole result: the slices join back to the original text exactly.
    pieces, offset = [], 0
    while offset < total:
        page = await _call(executor, "session_load", tool_call_id="c1", after=0, before=1,
                           content_offset=offset, content_limit=65536)  # fmt: skip
        part = next(m for m in page["messages"] if m["anchor"])
        assert part["content_offset"] == offset and part["returned_bytes"] > 0
        pieces.append(part["content"])
        offset += part["returned_bytes"]
    assert "".join(pieces) == BIG


async def test_load_small_result_whole_and_window_by_event_id(store: Store) -> None:
    out = await _call(_executor(store), "session_load", event_id="e4", before=0, after=2)
    assert [m["event_id"] for m in out["messages"]] == ["e4", "e5", "e6"]
    anchor = out["messages"][0]
    text = "ACME has 1500 open invoices; the refund is pending"
    assert anchor["content"] == text and not anchor["content_truncated"]
    assert anchor["content_bytes"] == anchor["returned_bytes"] == len(text)


async def test_load_errors_come_back_as_tool_answers(store: Store) -> None:
    executor = _executor(store)
    assert await _call(executor, "session_load", event_id="nope") == {"error": event_not_found("nope", "s1")}
    assert await _call(executor, "session_load", tool_call_id="zz") == {
        "error": 'tool_call_id "zz" not found in session "s1"'
    }
    stale = await _call(executor, "session_load", event_id="nope", tool_call_id="c1", content_limit=16)
    assert stale["anchor_event_id"] == "e3"
    # Another user's event id is unknown in this tenant, whatever session id the model passes.
    assert await _call(executor, "session_load", event_id="b1", session_id="s9") == {
        "error": event_not_found("b1", "s9")
    }


@pytest.mark.parametrize("limit", [1000, None, 65536])
async def test_load_pages_huge_tool_call_arguments_within_the_limit_and_reaches_every_byte(
    store: Store, limit: int | None
) -> None:
    """An assistant event with a long text and calls with huge arguments (ASCII, CJK): each answer holds at most
    ``content_limit`` bytes of its text and arguments together; following ``next_content_offset`` from the first
    answer gives back the text and every call's arguments exactly."""
    key = SessionKey("shop", "alice", "s-args")
    text = "先查库存，再下单；stock first, then the order. " * 100
    arguments = {
        "c1": json.dumps({"rows": [f"row {i:05d} sku-{i}" for i in range(4000)]}),
        "c2": json.dumps({"备注": "订单编号一二三四五六七八九十" * 1800}, ensure_ascii=False),
        "c3": "{}",
    }
    calls = [{"id": c, "type": "function", "function": {"name": f"tool_{c}", "arguments": a}}
             for c, a in arguments.items()]  # fmt: skip
    await store.events(
        event(key, "u1", at=1, content="下单"),
        event(key, "a1", at=2, role="assistant", content=text, tool_calls=calls),
        event(key, "t1", at=3, role="tool", content="ok", tool_call_id="c3", name="tool_c3"),
    )
    cap = limit or 16 * 1024
    executor = _executor(store, key)
    got_text, got_args = "", dict.fromkeys(arguments, "")
    offset: int | None = 0
    pages = 0
    while offset is not None:
        args: dict[str, Any] = {"event_id": "a1", "content_offset": offset}
        if limit is not None:
            args["content_limit"] = limit
        call = ToolCall(id="t", function=FunctionCall(name="session_load", arguments=json.dumps(args)))
        message = await executor.execute(call)
        body = json.loads(message.content or "")
        anchor = next(m for m in body["messages"] if m["anchor"])
        page = anchor["returned_bytes"] + sum(c["returned_bytes"] for c in anchor["tool_calls"])
        assert 0 < page <= cap, (offset, page)
        assert len((message.content or "").encode()) <= cap * 1.25 + 4096
        assert anchor["payload_bytes"] == len(text.encode()) + sum(len(a.encode()) for a in arguments.values())
        got_text += anchor["content"]
        for part in anchor["tool_calls"]:
            got_args[part["id"]] += part["arguments"]
        offset, pages = anchor.get("next_content_offset"), pages + 1
        assert pages < 1000
    assert got_text == text and got_args == arguments
    assert pages >= anchor["payload_bytes"] // cap
