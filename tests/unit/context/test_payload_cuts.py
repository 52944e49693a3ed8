"""Argument and message cuts: head + tail on character boundaries, arguments still JSON, the event named."""

from __future__ import annotations

import json
import re
import unicodedata

import pytest

from projections.textcut import is_boundary
from schemas import Message
from streams.context.compaction import RecoveryHint, arguments_placeholder, truncate_middle
from streams.context.items import HistoryItem
from streams.context.notes import CONTEXT_NOTE_KEY
from streams.context.payload_cuts import (
    PayloadCuts,
    arguments_marker,
    cut_arguments,
    cut_payloads,
    cut_text,
    message_marker,
)
from streams.rules.tokens import ScriptAwareTokenCounter

COUNTER = ScriptAwareTokenCounter()
FAMILY = "👨\u200d👩\u200d👧\u200d👦"
HANGUL_NFD = unicodedata.normalize("NFD", "한국어 문장")


def _pieces(original: str, cut: str, mark: str) -> tuple[str, str]:
    head, rest = cut.split(mark, 1)
    tail = rest.split("]", 1)[1].lstrip()
    return head.rstrip("\n"), tail


@pytest.mark.parametrize("unit", [FAMILY, HANGUL_NFD, "数据表格", "é" + "\u0301" * 2])
def test_a_cut_message_keeps_whole_characters_at_both_ends(unit: str) -> None:
    text = unit * 500
    marker = message_marker("e7", session_load=True)
    for limit in (20, 60, 200):
        cut = cut_text(text, lambda s, n=limit: COUNTER.count_text(s) <= n, marker)
        assert 'session_load(event_id="e7")' in cut and "event_id=e7;" in cut
        head, tail = _pieces(text, cut, "\n\n[distill:")
        assert text.startswith(head) and text.endswith(tail)
        assert is_boundary(text, len(head)) and is_boundary(text, len(text) - len(tail))


def test_cut_arguments_cut_string_values_and_stay_json() -> None:
    args = json.dumps({"path": "报告.md", "content": "开头" + "数据" * 3000 + "结尾", "n": 3}, ensure_ascii=False)
    marker = arguments_marker("e3", "c1", session_load=True)
    cut = cut_arguments(args, lambda s: COUNTER.count_text(s) <= 300, marker)
    value = json.loads(cut)
    assert value["path"] == "报告.md" and value["n"] == 3
    assert value["content"].startswith("开头") and value["content"].endswith("结尾")
    assert "event_id=e3; tool_call_id=c1" in value["content"] and COUNTER.count_text(cut) <= 300


def test_cut_arguments_holding_an_escaped_lone_surrogate_stay_utf8() -> None:
    """Arguments that escape a lone surrogate (``"\\udce9"``: a file name of non-UTF-8 bytes) are plain text,
    but a cut decodes them: written back raw, the lone surrogate made the request unsendable (the client
    encodes it as UTF-8). The cut writes it back escaped, so the arguments still decode to the same value."""
    name = "报告\udce9\udcff.md"
    args = json.dumps({"path": name, "content": name + "数据" * 3000 + "结尾"})
    assert args.isascii()
    cut = cut_arguments(args, lambda s: COUNTER.count_text(s) <= 300, arguments_marker("e3", "c1", session_load=True))
    cut.encode("utf-8")
    value = json.loads(cut)
    assert value["path"] == name and value["content"].startswith(name) and value["content"].endswith("结尾")


@pytest.mark.parametrize("args", ["not json " + "字" * 4000, json.dumps(list(range(3000)))])
def test_arguments_not_in_strings_are_wrapped_head_and_tail_as_json(args: str) -> None:
    cut = cut_arguments(args, lambda s: COUNTER.count_text(s) <= 300, arguments_marker("e3", "c1", session_load=False))
    value = json.loads(cut)
    assert "event_id=e3" in value[CONTEXT_NOTE_KEY] and "stays stored" in value[CONTEXT_NOTE_KEY]
    assert args.startswith(value["head"]) and args.endswith(value["tail"]) and value["head"]


def test_only_stored_events_are_cut_and_the_current_message_keeps_its_floor() -> None:
    long = "很长的问题" * 2000
    items = [
        HistoryItem(Message(role="user", content=long), "e1"),
        HistoryItem(Message(role="user", content=long), None, origin="current"),  # nothing to load it back from
        HistoryItem(Message(role="user", content=long), "e3"),
    ]
    out, stats = cut_payloads(items, PayloadCuts(message_max_tokens=64), COUNTER, current_event_id="e3")
    assert out[1] is items[1] and stats.event_ids == ["e1", "e3"]
    assert COUNTER.count_message(out[0].message) <= 64 < COUNTER.count_message(out[2].message) <= 256
    assert (out[2].message.content or "").startswith("很长的问题")


def test_every_cut_has_one_marker_format_and_every_replaced_arguments_one_key() -> None:
    """Tool results, arguments and messages: one marker, one way to name the load, one JSON key."""
    text = "日志内容" * 500
    hint = RecoveryHint("e7", "c7", "fetch", "oversized")
    marks = [
        truncate_middle(text, 600, hint, session_load=True),
        cut_text(text, lambda s: len(s) <= 600, message_marker("e7", session_load=True)),
        cut_text(text, lambda s: len(s) <= 600, arguments_marker("e7", "c7", session_load=True)),
    ]
    pattern = re.compile(
        r"\[distill: \d+ characters cut from the middle of (this tool result|this message|these tool-call arguments); "
        r"event_id=e7; (tool_call_id=c7; )?(tool_name=fetch; )?session_load\(event_id=\"e7\"\) returns it whole\]"
    )
    assert [bool(pattern.search(m)) for m in marks] == [True, True, True]
    marker = arguments_marker("e7", "c7", session_load=True)
    wrapped = cut_arguments("不是 JSON " * 400, lambda s: len(s) <= 500, marker)
    assert set(json.loads(wrapped)) == {CONTEXT_NOTE_KEY, "head", "tail"}
    assert set(json.loads(arguments_placeholder("e7", session_load=True))) == {CONTEXT_NOTE_KEY}
