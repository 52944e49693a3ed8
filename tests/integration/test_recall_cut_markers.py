"""Every cut marker names a ``session_load`` that returns the cut payload whole, against real Cassandra.

The promise: the previous summary is the only copy of what lies before a
boundary; every event payload is stored and recallable, so when a request must
shrink, payloads are cut first, each cut leaving a marker that names the load
giving it back. Here each kind of cut is made by the code that makes it in
production — the summarizer's cuts (``streams.summarizer.payloads``: a tool
result, tool-call arguments, long user / assistant / system text) and the read
side's (``streams.context.compaction``: Pass 1 placeholders, Pass 2 middle
cuts, the resume tail's placeholders) — over ASCII and Chinese payloads. Then
each marker is followed the way an agent follows it: the event (and call) it
names is loaded through the recall executor and ``SessionReader.session_load``,
following ``next_content_offset`` until nothing is left, and what comes back must
be the original payload. The oracle: unique markers at the start, the middle
and the end of every payload (the middle one is always in the cut part).
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio

from schemas import FunctionCall, Message, SessionEvent, SessionKey, ToolCall
from schemas.settings import Settings
from streams.clients.recall_reader import CassandraRecallReader
from streams.context.compaction import CompactionConfig, compact, compact_resume_tail
from streams.context.items import HistoryItem
from streams.context.recall_tools import RecallExecutor
from streams.rules.tokens import SimpleTokenCounter
from streams.summarizer.payloads import cut_event
from tests.integration.test_projections_support import Store, close_store, event, open_store
from tests.support.markers import MarkerBook, find_markers

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="session")]

KEY = SessionKey("shop", "carol", "cuts")
BOOK = MarkerBook()
_ASCII = "The deployment log shows worker restarts and queue depth figures for the night shift. "
_CJK = "数据库连接池在夜间批处理时耗尽，重试队列不断增长，值班工程师记录了每一次重启。"


def _payload(event_id: str, filler: str, chars: int) -> str:
    """About ``chars`` characters of ``filler`` with markers at the start, in the middle and at the end."""
    start, middle, end = (BOOK.mint(event_id) for _ in range(3))
    half = filler * (chars // (2 * len(filler)) + 1)
    return f"{start} {half}{middle}{half} {end}"


def _arguments(event_id: str, filler: str, chars: int) -> str:
    """Tool-call arguments: JSON whose string value carries the three markers."""
    return json.dumps({"query": _payload(event_id, filler, chars), "limit": 50}, ensure_ascii=False)


def _call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


# Large enough that a default-limit (16 KiB) load must page: the Chinese ones are 3 bytes a character.
USER = _payload("u1", _ASCII, 20_000)
USER_CJK = _payload("u2", _CJK, 9_000)
ANSWER_CJK = _payload("a1", _CJK, 12_000)
SYSTEM = _payload("y1", _ASCII + _CJK, 6_000)
CALL_TEXT = _payload("a2", _ASCII, 5_000)
ARGS_CJK = _arguments("a2", _CJK, 8_000)
ARGS_ASCII = _arguments("a2", _ASCII, 30_000)
RESULT = _payload("t1", _ASCII, 40_000)
RESULT_CJK = _payload("t2", _CJK + _ASCII, 15_000)
RESUME_ARGS = _arguments("a3", _CJK, 4_000)
RESUME_RESULT = _payload("t3", _CJK, 5_000)

RECORDS = [
    event(KEY, "y1", at=1, role="system", content=SYSTEM),
    event(KEY, "u1", at=2, content=USER),
    event(KEY, "u2", at=3, content=USER_CJK),
    event(KEY, "a1", at=4, role="assistant", content=ANSWER_CJK),
    event(
        KEY,
        "a2",
        at=5,
        role="assistant",
        content=CALL_TEXT,
        tool_calls=[_call("c1", "search_logs", ARGS_ASCII), _call("c2", "查询工单", ARGS_CJK)],
    ),
    event(KEY, "t1", at=6, role="tool", content=RESULT, tool_call_id="c1", name="search_logs"),
    event(KEY, "t2", at=7, role="tool", content=RESULT_CJK, tool_call_id="c2", name="查询工单"),
    event(KEY, "u3", at=8, content="再查一次 the queue"),
    event(KEY, "a3", at=9, role="assistant", content=None, tool_calls=[_call("c3", "search_logs", RESUME_ARGS)]),
    event(KEY, "t3", at=10, role="tool", content=RESUME_RESULT, tool_call_id="c3", name="search_logs"),
]
EVENTS = {r["event_id"]: SessionEvent.model_validate(r) for r in RECORDS}


@pytest_asyncio.fixture(loop_scope="session")
async def store(pooled_settings: Settings) -> AsyncIterator[Store]:
    s = open_store(pooled_settings)
    try:
        await s.events(*RECORDS)
        assert s.dead == []
        yield s
    finally:
        close_store(s)


@dataclass(frozen=True)
class Cut:
    """One marker found in a cut text: the event it names, the call (for arguments), what was cut."""

    event_id: str
    tool_call_id: str | None
    arguments: bool


_SUMMARY_MARK = re.compile(
    r"chars of (?P<what>this tool result|the arguments of this tool call|this message)"
    r"(?: \(call (?P<call>[^)]+)\))? left out; session_load\(event_id=\"(?P<event>[^\"]+)\"\)"
)
_READ_MARK = re.compile(r"event_id[=:] ?(?P<event>[^;\s]+)[;\n]\s*(?:tool_call_id[=:] ?(?P<call>[^;\s]*))?")
_RESUME_ARGS_MARK = re.compile(r"session_load\(event_id=\\?\"(?P<event>[^\"\\]+)\\?\"\) returns them")


def _summary_cuts(text: str) -> list[Cut]:
    return [
        Cut(m["event"], m["call"], m["what"] == "the arguments of this tool call") for m in _SUMMARY_MARK.finditer(text)
    ]


async def _answer(executor: RecallExecutor, **args: Any) -> Any:
    call = ToolCall(id="r1", function=FunctionCall(name="session_load", arguments=json.dumps(args)))
    return json.loads((await executor.execute(call)).content or "")


async def _load_whole(executor: RecallExecutor, cut: Cut) -> str:
    """What the agent reads by following ``cut``: every page of the named event (its text, then its calls'
    arguments, paged together), following ``next_content_offset``; the named payload's slices, joined."""
    pieces: list[str] = []
    offset: int | None = 0
    while offset is not None:
        answer = await _answer(executor, event_id=cut.event_id, before=0, after=1, content_offset=offset)
        assert "error" not in answer, (cut, answer)
        [anchor] = [m for m in answer["messages"] if m["anchor"]]
        assert anchor["event_id"] == cut.event_id
        if cut.arguments:
            [part] = [c for c in anchor.get("tool_calls", []) if c["id"] == cut.tool_call_id]
            text, size = part["arguments"], part["returned_bytes"]
        else:
            text, size = anchor["content"], anchor["returned_bytes"]
        assert size == len(text.encode())
        pieces.append(text)
        offset = anchor.get("next_content_offset")
    return "".join(pieces)


def _original(cut: Cut) -> str:
    message = EVENTS[cut.event_id].message
    if cut.arguments:
        return next(c.function.arguments for c in message.tool_calls if c.id == cut.tool_call_id)
    return message.content or ""


async def _check_each(
    store: Store, texts: list[str], cuts: list[Cut], expected: set[tuple[str, str | None, bool]]
) -> None:
    """Each cut names its payload; loading it gives the payload back whole (its three markers in order)."""
    assert {(c.event_id, c.tool_call_id if c.arguments else None, c.arguments) for c in cuts} == expected
    executor = RecallExecutor(
        CassandraRecallReader(store.reader), app_name=KEY.app_name, user_id=KEY.user_id, session_id=KEY.session_id
    )
    cut_text = "\n".join(texts)
    for cut in cuts:
        original = _original(cut)
        markers = find_markers(original)
        assert len(markers) == 3 and markers[1] not in cut_text  # the middle was cut away
        loaded = await _load_whole(executor, cut)
        assert loaded == original, cut
        assert find_markers(loaded) == markers


async def test_every_summarizer_cut_loads_back_whole(store: Store) -> None:
    texts, cuts = [], []
    for ev in EVENTS.values():
        cut, records = cut_event(ev, 400)
        text = json.dumps(cut.message.model_dump(), ensure_ascii=False)
        texts.append(text)
        found = [c for piece in _message_texts(cut.message) for c in _summary_cuts(piece)]
        assert len(found) == len(records)
        cuts.extend(found)
    await _check_each(store, texts, cuts, {
        ("y1", None, False), ("u1", None, False), ("u2", None, False), ("a1", None, False), ("a2", None, False),
        ("a2", "c1", True), ("a2", "c2", True), ("t1", None, False), ("t2", None, False), ("a3", "c3", True),
        ("t3", None, False),
    })  # fmt: skip


def _message_texts(message: Message) -> list[str]:
    return [message.content or "", *(c.function.arguments for c in message.tool_calls)]


def _items(resume: bool) -> list[HistoryItem]:
    request = {"y1": "r0", "u1": "r1", "u2": "r1", "a1": "r1", "a2": "r1", "t1": "r1", "t2": "r1"}
    return [
        HistoryItem(
            ev.message,
            event_id=ev.event_id,
            request_id=request.get(ev.event_id, "r2"),
            origin="resume" if resume and ev.event_id in ("a3", "t3") else "history",
        )
        for ev in EVENTS.values()
    ]


def _read_cuts(texts: list[str]) -> list[Cut]:
    cuts: list[Cut] = []
    for text in texts:
        cuts.extend(Cut(m["event"], None, False) for m in _READ_MARK.finditer(text))
        cuts.extend(Cut(m["event"], None, True) for m in _RESUME_ARGS_MARK.finditer(text))
    return cuts


async def test_every_read_side_cut_loads_back_whole(store: Store) -> None:
    counter = SimpleTokenCounter()

    def passes(config: CompactionConfig) -> list[HistoryItem]:
        return compact(_items(False), config, counter, current_unit="req:r2", session_load=True)[0]

    # Pass 1: historical results replaced by a placeholder naming the event.
    placeholders = passes(CompactionConfig(enabled=True, keep_recent_requests=0, tool_result_max_tokens=100))
    # Pass 2: the middle of every oversized result cut, the marker naming the event (then a marker alone).
    middles = passes(CompactionConfig(enabled=True, tool_result_max_tokens=0, oversized_tool_result_max_tokens=300))
    tiny = passes(CompactionConfig(enabled=True, tool_result_max_tokens=0, oversized_tool_result_max_tokens=12))
    # The resume tail: a result and the arguments of its call replaced.
    config = CompactionConfig(enabled=True, tool_result_max_tokens=100)
    resumed, _ = compact_resume_tail(_items(True), config, counter, session_load=True)
    for items, expected in (
        (placeholders, {("t1", False), ("t2", False)}),
        (middles, {("t1", False), ("t2", False), ("t3", False)}),
        (tiny, {("t1", False), ("t2", False), ("t3", False)}),
        (resumed, {("t3", False), ("a3", True)}),
    ):
        changed = [t for item, before in zip(items, _items(False), strict=True)
                   for t in _message_texts(item.message) if item.message != before.message]  # fmt: skip
        # A resumed call's arguments name the event only; its one call is the one cut.
        cuts = [Cut(c.event_id, "c3", True) if c.arguments else c for c in _read_cuts(changed)]
        await _check_each(store, changed, cuts, {(e, "c3" if a else None, a) for e, a in expected})
