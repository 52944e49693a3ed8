"""The exported JSON Schema and the worker's decoder agree on one corpus of records.

A producer in another language validates with ``distill schema``; the worker
decodes with pydantic. A record the schema accepts and the worker dead-letters
(or the reverse: an OpenAI SDK message dump the schema refuses) breaks that
contract, so every record below is put through both, and both must give the
expected answer.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonschema
import pytest
from openai.types.chat import (
    ChatCompletionMessage,
    ChatCompletionMessageCustomToolCall,
    ChatCompletionMessageFunctionToolCall,
)
from openai.types.chat.chat_completion_message_custom_tool_call import Custom
from openai.types.chat.chat_completion_message_function_tool_call import Function

from schemas import SessionEvent
from streams.app.decoding import Rejected, decode_event_record
from streams.cli.demo_cmd import load_demo_session
from streams.cli.schema_cmd import json_schemas

SCHEMA = json_schemas()["event-record"]
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
BASE: dict[str, Any] = {
    "app_name": "app",
    "user_id": "u1",
    "session_id": "s1",
    "event_id": "e1",
    "timestamp": "2026-05-02T09:00:00Z",
    "author": "assistant",
}


def _event(message: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {**BASE, "message": message, **fields}


def _sdk_call() -> ChatCompletionMessageFunctionToolCall:
    return ChatCompletionMessageFunctionToolCall(
        id="call_1", type="function", function=Function(name="search_flights", arguments='{"to": "LIS"}')
    )


def _sdk_dumps() -> list[tuple[str, dict[str, Any]]]:
    """Assistant messages exactly as the OpenAI SDK dumps them (``None`` for every absent field)."""
    text = ChatCompletionMessage(role="assistant", content="Flights found.")
    calls = ChatCompletionMessage(role="assistant", content=None, tool_calls=[_sdk_call()])
    chinese = ChatCompletionMessage(role="assistant", content="已为您找到里斯本的航班：柏林出发，五月十二日。")
    messages = {"sdk text": text, "sdk tool calls": calls, "sdk cjk": chinese}
    out = [(name, m.model_dump()) for name, m in messages.items()]
    out += [(f"{name} (json mode, unset excluded)", m.model_dump(mode="json", exclude_unset=True)) for name, m in
            messages.items()]  # fmt: skip
    return out


def _accepted() -> list[tuple[str, dict[str, Any]]]:
    records: list[tuple[str, dict[str, Any]]] = [(name, _event(m)) for name, m in _sdk_dumps()]
    records += [
        ("plain user", _event({"role": "user", "content": "hi"}, author="user")),
        ("tool_calls null", _event({"role": "assistant", "content": "ok", "tool_calls": None})),
        (
            "content parts",
            _event(
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "这张图片里是什么？"},
                        {"type": "image_url", "image_url": {"url": "https://example.invalid/a.png"}},
                        {"type": "text", "text": " And in English?"},
                    ],
                },
                author="user",
            ),
        ),
        ("empty parts", _event({"role": "user", "content": []}, author="user")),
        (
            "tool result parts",
            _event({"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "{\"ok\": 1}"}]}),
        ),
        ("cjk everywhere",
         _event({"role": "user", "content": "我想去里斯本旅行五天"}, author="用户", filter_key="旅行/计划")),
        ("naive timestamp (UTC)", {**BASE, "timestamp": "2026-05-02 09:00:00.123", "message": {"role": "user"}}),
        ("offset timestamp", {**BASE, "timestamp": "2026-05-02T09:00:00+08:00", "message": {"role": "user"}}),
        ("whole float integer", _event({"role": "user", "content": "x"}, context_window=8192.0)),
        ("usage and error code", _event({"role": "assistant", "content": "x"}, usage={"prompt_tokens": 3},
                                        error={"code": "rate_limited"})),
        ("reasoning", _event({"role": "assistant", "content": "x", "reasoning_content": "先想一想"})),
        ("no type", {k: v for k, v in _event({"role": "user", "content": "a"}).items() if k != "type"}),
        ("partial, skip, error", _event({"role": "assistant", "content": "x"}, partial=True, skip_summarization=True,
                                        error={"type": "rate_limit", "message": "slow down", "code": 429})),
        ("unknown producer field", _event({"role": "user", "content": "x", "vendor": {"a": 1}}, trace_id="t-1")),
        ("context", _event({"role": "user", "content": "x"}, context={"tenant": "acme"})),
        ("summarize", {**{k: BASE[k] for k in ("app_name", "user_id", "session_id")}, "type": "summarize",
                       "command_id": "c1", "filter_key": "app/a", "force": True}),
        ("summarize_sync", {**{k: BASE[k] for k in ("app_name", "user_id", "session_id")}, "type": "summarize_sync",
                            "command_id": "c2", "reply_to": "r2", "model_request": {"messages": []}}),
        ("delete", {**{k: BASE[k] for k in ("app_name", "user_id", "session_id")}, "type": "delete_session",
                    "command_id": "c3"}),
    ]  # fmt: skip
    records += [(f"demo {r['event_id']}", r) for r in load_demo_session("demo")]
    return records


def _rejected() -> list[tuple[str, dict[str, Any]]]:
    good = _event({"role": "assistant", "content": "ok"})

    def without(field: str) -> dict[str, Any]:
        return {k: v for k, v in good.items() if k != field}

    def message(**fields: Any) -> dict[str, Any]:
        return {**good, "message": {"role": "assistant", **fields}}

    custom = ChatCompletionMessage(
        role="assistant",
        tool_calls=[ChatCompletionMessageCustomToolCall(id="c", type="custom", custom=Custom(name="n", input="i"))],
    )
    return [
        ("no event_id", without("event_id")),
        ("empty event_id", {**good, "event_id": ""}),
        ("no timestamp", without("timestamp")),
        ("no message", without("message")),
        ("no role", {**good, "message": {"content": "x"}}),
        ("bad role", message(role="developer", content="x")),
        ("content number", message(content=42)),
        ("content object", message(content={"text": "x"})),
        ("content part not an object", message(content=["just text"])),
        ("content part without type", message(content=[{"text": "x"}])),
        ("text part without text", message(content=[{"type": "text"}])),
        ("text part with non-string text", message(content=[{"type": "text", "text": 5}])),
        ("tool_calls object", message(content=None, tool_calls={"id": "c"})),
        ("tool call without id", message(tool_calls=[{"type": "function", "function": {"name": "f"}}])),
        ("custom tool call (sdk)", _event(custom.model_dump())),
        ("filter_key leading slash", {**good, "filter_key": "/app/a"}),
        ("filter_key empty segment", {**good, "filter_key": "app//a"}),
        ("filter_key trailing slash", {**good, "filter_key": "app/"}),
        ("context too many", {**good, "context": {f"k{i}": "v" for i in range(33)}}),
        ("context value too long", {**good, "context": {"k": "v" * 1025}}),
        ("context empty key", {**good, "context": {"": "v"}}),
        ("context non-string", {**good, "context": {"k": 1}}),
        ("context_window zero", {**good, "context_window": 0}),
        ("unknown type", {**good, "type": "what"}),
        ("summarize without command_id", {k: v for k, v in good.items() if k in BASE} | {"type": "summarize"}),
        ("empty app_name", {**good, "app_name": ""}),
        ("partial not a bool", {**good, "partial": "sometimes"}),
        ("timestamp garbage", {**good, "timestamp": "yesterday"}),
        ("timestamp as a number", {**good, "timestamp": 1714640000}),
        ("timestamp date only", {**good, "timestamp": "2026-05-02"}),
        ("timestamp month 13", {**good, "timestamp": "2026-13-02T09:00:00Z"}),
        ("timestamp offset without colon", {**good, "timestamp": "2026-05-02T09:00:00+0100"}),
        ("partial as a string", {**good, "partial": "true"}),
        ("skip_summarization as a number", {**good, "skip_summarization": 1}),
        ("context_window as a string", {**good, "context_window": "8192"}),
        ("schema_version as a string", {**good, "schema_version": "1"}),
        ("usage as strings", {**good, "usage": {"prompt_tokens": "3"}}),
        ("error code as a boolean", {**good, "error": {"code": True}}),
        ("force as a string", {k: v for k, v in good.items() if k in ("app_name", "user_id", "session_id")}
         | {"type": "summarize", "command_id": "c", "force": "yes"}),
        ("event_id as a number", {**good, "event_id": 5}),
        ("author null", {**good, "author": None}),
        ("model_request a list", {k: v for k, v in good.items() if k in ("app_name", "user_id", "session_id")}
         | {"type": "summarize_sync", "command_id": "c", "reply_to": "r", "model_request": [1]}),
        ("function arguments null", message(tool_calls=[{"id": "c", "function": {"name": "f", "arguments": None}}])),
    ]  # fmt: skip


def _schema_accepts(record: dict[str, Any]) -> bool:
    return VALIDATOR.is_valid(record)


def _decoder_accepts(record: dict[str, Any]) -> bool:
    return not isinstance(decode_event_record(json.dumps(record, ensure_ascii=False).encode(), 1 << 30), Rejected)


@pytest.mark.parametrize(("name", "record"), _accepted(), ids=[n for n, _ in _accepted()])
def test_both_accept(name: str, record: dict[str, Any]) -> None:
    errors = [e.message for e in VALIDATOR.iter_errors(copy.deepcopy(record))][:3]
    assert not errors, f"schema refuses {name}: {errors}"
    decoded = decode_event_record(json.dumps(record, ensure_ascii=False).encode(), 1 << 30)
    assert not isinstance(decoded, Rejected), f"decoder refuses {name}: {decoded}"


@pytest.mark.parametrize(("name", "record"), _rejected(), ids=[n for n, _ in _rejected()])
def test_both_reject(name: str, record: dict[str, Any]) -> None:
    assert not _schema_accepts(record), f"schema accepts {name}"
    assert not _decoder_accepts(record), f"decoder accepts {name}"


def test_list_of_parts_keeps_the_text_in_order() -> None:
    record = dict(_accepted())["content parts"]
    decoded = decode_event_record(json.dumps(record, ensure_ascii=False).encode(), 1 << 30)
    assert not isinstance(decoded, Rejected)
    assert isinstance(decoded, SessionEvent)
    assert decoded.message.content == "这张图片里是什么？ And in English?"


def test_the_corpus_covers_the_demo_session_and_sdk_dumps() -> None:
    names = [n for n, _ in _accepted()]
    assert sum(n.startswith("demo ") for n in names) == 46
    assert any("tool_calls" in r["message"] and r["message"]["tool_calls"] is None for n, r in _accepted()
               if n.startswith("sdk"))  # fmt: skip
