"""Recall tools: schemas by capability, the usage note, and the executor over the read protocol."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import FunctionCall, ToolCall
from streams.context import AssemblyOptions, assemble
from streams.context.compaction import RecoveryHint, historical_placeholder
from streams.context.recall_tools import (
    HISTORICAL_NOTE,
    USAGE_NOTE_MARK,
    RecallCapabilities,
    RecallExecutor,
    RecallReader,
    Window,
    WindowEvent,
    WindowSkip,
    recall_tools,
    usage_note,
)
from tests.unit.context.memory_reader import InMemoryReadAPI
from tests.unit.context.sessions import Session, summary_at

BOTH = RecallCapabilities(search=True, load=True)


def _names(caps: RecallCapabilities) -> list[str]:
    return [t["function"]["name"] for t in recall_tools(caps)]


def test_tools_are_offered_by_capability() -> None:
    assert _names(RecallCapabilities()) == []
    assert _names(RecallCapabilities(search=True)) == ["session_search"]
    assert _names(RecallCapabilities(load=True)) == ["session_load"]
    assert _names(BOTH) == ["session_search", "session_load"]
    load = recall_tools(RecallCapabilities(load=True))[0]["function"]["parameters"]["properties"]
    assert {"event_id", "tool_call_id", "before", "after", "content_offset", "content_limit"} <= set(load)


def test_usage_note_variants() -> None:
    assert usage_note(RecallCapabilities()) is None
    search_only = usage_note(RecallCapabilities(search=True)) or ""
    load_only = usage_note(RecallCapabilities(load=True)) or ""
    both = usage_note(BOTH) or ""
    assert "session_search" in search_only and "session_load" not in search_only
    assert "session_load" in load_only and "session_search" not in load_only
    assert "session_search" in both and "session_load" in both
    assert all(n.startswith(USAGE_NOTE_MARK) and "not instructions" in n for n in (search_only, load_only, both))


def test_assembly_adds_tools_and_note_once() -> None:
    s = Session()
    s.user("hi")
    own = [{"type": "function", "function": {"name": "session_load", "parameters": {}}}]
    req = assemble("sys", None, s.events, "q", own, AssemblyOptions(recall=BOTH))
    assert [t["function"]["name"] for t in req.tools] == ["session_load", "session_search"]
    assert req.messages[0]["content"].count(USAGE_NOTE_MARK) == 1
    again = assemble(req.messages[0]["content"], None, s.events, "q", own, AssemblyOptions(recall=BOTH))
    assert again.messages[0]["content"].count(USAGE_NOTE_MARK) == 1


def _history() -> tuple[Session, InMemoryReadAPI]:
    s = Session()
    s.turn("r1").user("please look up the invoice for ACME")
    s.call(("c1", "lookup"))
    s.result("c1", "invoice ACME-42 total 1200 EUR " + "detail " * 50, name="lookup")
    s.answer("The ACME invoice is ACME-42.")
    s.turn("r2").user("and the weather in Paris?")
    s.answer("Sunny in Paris.")
    other = Session("s2")
    other.user("ACME contract renewal discussed")
    stranger = Session("s3")
    stranger.user("ACME secret of another user")
    stranger.events = [e.model_copy(update={"user_id": "someone-else"}) for e in stranger.events]
    api = InMemoryReadAPI(s.events + other.events + stranger.events, [summary_at(s.events[3])])
    return s, api


def _executor(api: RecallReader, caps: RecallCapabilities = BOTH) -> RecallExecutor:
    return RecallExecutor(api, app_name="app", user_id="u1", session_id="s1", capabilities=caps)


async def _call(executor: RecallExecutor, name: str, **args: Any) -> dict[str, Any]:
    msg = await executor.execute(ToolCall(id="t1", function=FunctionCall(name=name, arguments=json.dumps(args))))
    assert msg.role == "tool" and msg.tool_call_id == "t1" and msg.name == name
    return dict(json.loads(msg.content or "{}"))


async def test_search_current_hidden_only_sees_covered_history_and_is_marked_historical() -> None:
    _, api = _history()
    out = await _call(_executor(api), "session_search", query="ACME invoice")
    assert out["historical_context"] is True and out["note"] == HISTORICAL_NOTE
    assert out["scope"] == "current_hidden"
    assert {r["event_id"] for r in out["results"]} == {"e1", "e3", "e4"}
    assert all(len(r["snippet"]) <= 280 for r in out["results"])
    first = out["results"][0]
    assert {"created", "context", "content_bytes", "content_truncated"} <= set(first) and "created_at" not in first
    paris = await _call(_executor(api), "session_search", query="Paris", scope="current_hidden")
    assert paris["results"] == []


async def test_search_scopes_never_cross_users() -> None:
    _, api = _history()
    others = await _call(_executor(api), "session_search", query="ACME", scope="other_sessions")
    assert [r["session_id"] for r in others["results"]] == ["s2"]
    everything = await _call(_executor(api), "session_search", query="ACME", scope="all_sessions")
    assert "s3" not in {r["session_id"] for r in everything["results"]}
    whole = await _call(_executor(api), "session_search", query="Paris", scope="current_session")
    assert {r["event_id"] for r in whole["results"]} == {"e5", "e6"}


async def test_search_normalizes_arguments() -> None:
    _, api = _history()
    blank = await _call(_executor(api), "session_search", query="   ")
    assert blank["results"] == [] and api.search_calls == 0
    assert blank["warning"] == "the query is blank: nothing was searched"  # not a silent "nothing there"
    assert "warning" not in await _call(_executor(api), "session_search", query="ACME")
    one = await _call(_executor(api), "session_search", query="ACME", top_k=1)
    assert one["scope"] == "current_hidden" and len(one["results"]) == 1
    many = await _call(_executor(api), "session_search", query="ACME", scope="current_session", top_k=500)
    assert "error" not in many and 1 < len(many["results"]) <= 10  # above the maximum: clamped, not refused
    numeric = await _call(_executor(api), "session_search", query="ACME", top_k="1", min_score="0.1")
    assert len(numeric["results"]) == 1


@pytest.mark.parametrize(
    ("name", "args", "error"),
    [
        ("session_search", {"query": "ACME", "min_score": "high"}, 'min_score must be a number ≥ 0, got "high"'),
        ("session_search", {"query": "ACME", "min_score": [1]}, "min_score must be a number ≥ 0, got [1]"),
        ("session_search", {"query": "ACME", "min_score": -0.5}, "min_score must be a number ≥ 0, got -0.5"),
        (
            "session_search",
            {"query": "ACME", "scope": "everywhere"},
            'scope must be one of current_hidden, current_session, other_sessions, all_sessions; got "everywhere"',
        ),
        (
            "session_search",
            {"query": "ACME", "search_mode": "dense"},
            'search_mode must be one of hybrid, lexical; got "dense"',
        ),
        ("session_search", {"query": "ACME", "top_k": 0}, "top_k must be an integer from 1 to 10, got 0"),
        ("session_search", {"query": "ACME", "top_k": 2.5}, "top_k must be an integer from 1 to 10, got 2.5"),
        ("session_search", {"query": "ACME", "top_k": True}, "top_k must be an integer from 1 to 10, got true"),
        ("session_search", {}, "query is required (a string)"),
        ("session_search", {"query": 42}, "query must be a string, got 42"),
        (
            "session_search",
            {"query": "ACME", "limit": 3},
            "unknown argument 'limit'; allowed: min_score, query, scope, search_mode, top_k",
        ),
        ("session_load", {"event_id": "e3", "before": -1}, "before must be an integer ≥ 0, got -1"),
        ("session_load", {"event_id": "e3", "after": "lots"}, 'after must be an integer ≥ 0, got "lots"'),
        ("session_load", {"event_id": "e3", "content_offset": -8}, "content_offset must be an integer ≥ 0, got -8"),
        (
            "session_load",
            {"event_id": "e3", "content_limit": -1},
            "content_limit must be an integer from 1 to 65536, got -1",
        ),
        ("session_load", {"event_id": ["e3"]}, 'event_id must be a string, got ["e3"]'),
    ],
)
async def test_bad_arguments_are_answered_with_a_specific_error(name: str, args: dict[str, Any], error: str) -> None:
    _, api = _history()
    assert await _call(_executor(api), name, **args) == {"error": error}


@pytest.mark.parametrize(
    ("raw", "start"),
    [
        ("[1, 2]", "arguments must be a JSON object, got list [1, 2]"),
        ('"e3"', 'arguments must be a JSON object, got str "e3"'),
        ("null", "arguments must be a JSON object, got NoneType null"),
        ('{"query": "ACME", "min_score": 1e400}', "min_score must be a number ≥ 0, got Infinity"),
        ('{"event_id": "e3", "before": 1e400}', "before must be an integer ≥ 0, got Infinity"),
        ('{"query": "ACME", "min_score": NaN}', "min_score must be a number ≥ 0, got NaN"),
        ("[" * 100_000, "arguments could not be read as JSON"),
        ("1" * 5000, "arguments could not be read as JSON"),
        ('{"query": "ACME",', "arguments are not valid JSON: Expecting property name enclosed in double quotes"),
    ],
)
async def test_unreadable_arguments_are_answered_with_a_specific_error(raw: str, start: str) -> None:
    _, api = _history()
    name = "session_load" if "event_id" in raw else "session_search"
    msg = await _executor(api).execute(ToolCall(id="t", function=FunctionCall(name=name, arguments=raw)))
    assert msg.role == "tool" and msg.tool_call_id == "t"
    assert json.loads(msg.content or "")["error"].startswith(start)


async def test_huge_window_sides_are_answered_at_once() -> None:
    _, api = _history()
    out = await _call(_executor(api), "session_load", event_id="e3", before=10**18, after=10**18)
    assert out["anchor_event_id"] == "e3"
    # Clamped, and said: the model learns the window is smaller than it asked for, and how to read on.
    assert (out["before"], out["after"]) == (2, 2) and "limited to 4 events" in out["warning"]
    small = await _call(_executor(api), "session_load", event_id="e3", before=1, after=1)
    assert (small["before"], small["after"]) == (1, 1) and "warning" not in small


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
_SEARCH_KEYS = st.sampled_from(["query", "scope", "top_k", "min_score", "search_mode", "other"])
_LOAD_KEYS = st.sampled_from(
    ["event_id", "tool_call_id", "session_id", "before", "after", "content_offset", "content_limit", "other"]
)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(["session_search", "session_load"]),
    st.dictionaries(_SEARCH_KEYS | _LOAD_KEYS, _JSON, max_size=5) | _JSON,
)
async def test_any_json_arguments_are_answered_never_raised(name: str, args: Any) -> None:
    _, api = _history()
    msg = await _executor(api).execute(ToolCall(id="t", function=FunctionCall(name=name, arguments=json.dumps(args))))
    body = json.loads(msg.content or "")
    assert msg.role == "tool" and msg.tool_call_id == "t"
    assert ("error" in body and isinstance(body["error"], str) and body["error"]) or body["historical_context"]


class _DownReader:
    """A read side whose store does not answer (what the Cassandra driver raises when no host is up)."""

    class NoHostAvailable(Exception):
        pass

    async def search(self, query: Any) -> Any:
        raise self.NoHostAvailable("Unable to connect to any servers")

    async def load_window(self, query: Any) -> Any:
        raise self.NoHostAvailable("Unable to connect to any servers")


async def test_a_store_failure_is_answered_as_a_retryable_tool_error(caplog: pytest.LogCaptureFixture) -> None:
    executor = _executor(_DownReader())
    for name, args in (("session_search", {"query": "ACME"}), ("session_load", {"event_id": "e3"})):
        body = await _call(executor, name, **args)
        assert body["retryable"] is True
        assert body["error"].startswith(f"{name} could not read the session history right now (NoHostAvailable)")
    assert "Unable to connect to any servers" in caplog.text


async def test_load_by_event_id_returns_a_window() -> None:
    _, api = _history()
    out = await _call(_executor(api), "session_load", event_id="e3", before=1, after=1)
    assert out["historical_context"] is True
    assert [m["event_id"] for m in out["messages"]] == ["e1", "e3", "e4"]  # the call event is not eligible
    anchor = out["messages"][1]
    assert anchor["anchor"] and anchor["tool_call_id"] == "c1" and anchor["tool_name"] == "lookup"
    assert not anchor["content_truncated"]


async def test_load_of_a_tool_call_event_pages_each_calls_arguments() -> None:
    """A cut marker may name an assistant event with tool calls: the load pages through every call's arguments,
    the anchor's text and arguments together at most the content limit per answer."""
    s = Session()
    s.user("查一下订单")
    arguments = json.dumps({"note": "订单" * 40 + "END"}, ensure_ascii=False)
    s.call(("c1", "lookup", arguments), ("c2", "查询", "{}"))
    s.result("c1", "done", name="lookup")
    executor = _executor(InMemoryReadAPI(s.events))
    out = await _call(executor, "session_load", event_id="e2", content_limit=100)
    assert [m["event_id"] for m in out["messages"]] == ["e1", "e2", "e3"]
    [anchor] = [m for m in out["messages"] if m["anchor"]]
    assert [(c["id"], c["name"]) for c in anchor["tool_calls"]] == [("c1", "lookup"), ("c2", "查询")]
    first, second = anchor["tool_calls"]
    assert first["arguments_bytes"] == len(arguments.encode()) and first["arguments_truncated"]
    assert first["returned_bytes"] == len(first["arguments"].encode()) <= 100
    assert (second["arguments"], second["arguments_bytes"], second["arguments_truncated"]) == ("", 2, True)
    assert anchor["payload_bytes"] == len(arguments.encode()) + 2 and anchor["next_content_offset"] > 0
    assert all("tool_calls" not in m for m in out["messages"] if not m["anchor"])
    pieces, rest, offset = [], [], 0
    stream = (anchor["content"] + arguments + "{}").encode()  # the text (empty here), then each call's
    seen = bytearray(len(stream))
    while offset is not None:
        page = await _call(executor, "session_load", event_id="e2", content_offset=offset, content_limit=100)
        anchor = next(m for m in page["messages"] if m["anchor"])
        calls = anchor["tool_calls"]
        assert anchor["returned_bytes"] + sum(c["returned_bytes"] for c in calls) <= 100
        parts = [(anchor["content_offset"], anchor["content"], anchor["returned_bytes"])]
        parts += [(c["arguments_offset"], c["arguments"], c["returned_bytes"]) for c in calls]
        for at, piece, n in parts:
            if n == 0:  # a part this page holds nothing of names no position (an empty text: where it sits)
                assert at is None or (piece == "" and at == offset == 0), (at, offset)
                continue
            assert stream[at : at + n] == piece.encode() and not any(seen[at : at + n])  # a stream position
            seen[at : at + n] = b"\x01" * n
        pieces.append(calls[0]["arguments"])
        rest.append(calls[1]["arguments"])
        offset = anchor.get("next_content_offset")
    assert "".join(pieces) == arguments and "".join(rest) == "{}" and all(seen)


async def test_load_by_tool_call_id_slices_the_anchor() -> None:
    _, api = _history()
    out = await _call(_executor(api), "session_load", tool_call_id="c1", content_offset=8, content_limit=10)
    assert out["anchor_event_id"] == "e3"
    anchor = next(m for m in out["messages"] if m["anchor"])
    assert anchor["content"] == "ACME-42 to"
    assert (anchor["content_offset"], anchor["returned_bytes"], anchor["content_truncated"]) == (8, 10, True)
    neighbour = next(m for m in out["messages"] if not m["anchor"])
    assert neighbour["content_offset"] == 0 and neighbour["returned_bytes"] <= 10


async def test_load_falls_back_to_tool_call_id_for_a_stale_event_id() -> None:
    _, api = _history()
    out = await _call(_executor(api), "session_load", event_id="gone", tool_call_id="c1")
    assert out["anchor_event_id"] == "e3"
    stale = await _call(_executor(api), "session_load", event_id="gone")
    assert stale == {"error": NOT_FOUND.format(event_id="gone", session_id="s1")}


NOT_FOUND = (
    'anchor event not found: {event_id} in session "{session_id}" (pass session_id to load an event of another session)'
)


async def test_an_event_not_found_says_which_session_was_searched() -> None:
    """Go's text first, then the session searched and the hint to pass ``session_id``: an agent that left it out
    learns its own session was searched; one that passed another session's id sees that one named."""
    _, api = _history()
    own = await _call(_executor(api), "session_load", event_id="x9")
    assert own["error"].startswith("anchor event not found: x9")
    assert own == {"error": NOT_FOUND.format(event_id="x9", session_id="s1")}
    other = await _call(_executor(api), "session_load", event_id="x9", session_id="s7")
    assert other == {"error": NOT_FOUND.format(event_id="x9", session_id="s7")}


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ({}, "event_id is required unless tool_call_id is provided"),
        ({"tool_call_id": "zz"}, 'tool_call_id "zz" not found in session "s1"'),
        ({"event_id": "e3", "before": "many"}, 'before must be an integer ≥ 0, got "many"'),
    ],
)
async def test_load_errors_are_answered_not_raised(args: dict[str, Any], error: str) -> None:
    _, api = _history()
    assert await _call(_executor(api), "session_load", **args) == {"error": error}


async def test_bad_arguments_and_unoffered_tools_are_errors() -> None:
    _, api = _history()
    executor = _executor(api, RecallCapabilities(search=True))
    msg = await executor.execute(ToolCall(id="t", function=FunctionCall(name="session_search", arguments="{oops")))
    assert json.loads(msg.content or "")["error"].startswith("arguments are not valid JSON")
    assert await _call(executor, "session_load", event_id="e3") == {"error": "tool 'session_load' is not available"}
    assert executor.handles("session_search") and not executor.handles("session_load")


async def test_missing_window_sides_take_the_read_rule_defaults() -> None:
    _, api = _history()
    executor = _executor(api, RecallCapabilities(load=True))
    # before omitted → the default 1, not 0; after=0 given explicitly → kept.
    body = await _call(executor, "session_load", event_id="e3", after=0)
    assert [m["event_id"] for m in body["messages"]] == ["e1", "e3"]  # e2 (a raw tool call) is never loaded


def test_every_paging_hint_names_next_content_offset() -> None:
    """The load pages the anchor's text and its calls' arguments as one stream: every hint the model
    reads says to follow the answer's next_content_offset (not a slice of its own choosing)."""
    hint = RecoveryHint("e3", "c1", "fetch", "historical_compaction")
    [load] = recall_tools(RecallCapabilities(load=True))
    offset = load["function"]["parameters"]["properties"]["content_offset"]
    texts = {
        "placeholder": historical_placeholder(hint, session_load=True),
        "usage note": usage_note(RecallCapabilities(load=True)) or "",
        "tool": load["function"]["description"],
        "content_offset": offset.get("description", ""),
    }
    for where, text in texts.items():
        assert "next_content_offset" in text, where
        assert "in slices" not in text, where
    assert "one stream" in texts["tool"] and "tool calls' arguments" in texts["content_offset"]


class _SkippingReader:
    """A reader whose window passes over a tool-call event and an error event without text."""

    async def search(self, query: Any) -> list[Any]:
        return []

    async def load_window(self, query: Any) -> Window:
        events = [WindowEvent("u1", "user", "hi", anchor=True, content_bytes=2, returned_bytes=2),
                  WindowEvent("t1", "tool", "ok", tool_call_id="c1", content_bytes=2, returned_bytes=2)]  # fmt: skip
        return Window("u1", events, [WindowSkip("a1", "assistant", ("c1",)), WindowSkip("x1", "assistant")])


async def test_load_names_the_events_its_window_passes_over() -> None:
    executor = RecallExecutor(_SkippingReader(), app_name="a", user_id="u", session_id="s")
    call = ToolCall(id="r", function=FunctionCall(name="session_load", arguments='{"event_id": "u1", "after": 3}'))
    answer = json.loads((await executor.execute(call)).content or "")
    assert [m["event_id"] for m in answer["messages"]] == ["u1", "t1"]
    assert answer["skipped_events"] == [
        {"event_id": "a1", "role": "assistant", "tool_call_ids": ["c1"]},
        {"event_id": "x1", "role": "assistant"},
    ]
    assert "skipped_events" in recall_tools(BOTH)[1]["function"]["description"]
