"""The oracle of fitting: under a tight budget no event leaves the request without a word.

Every event carries CJK markers (at the head, the middle and the tail of a huge
tool-call argument or a huge pasted message). After fitting, each marker is in
the request, or a ``[distill: …]`` note in the request names its event — and then
``session_load(event_id=…)`` (paged) gives the event's text or arguments back
whole. Arguments stay JSON, and the current user message keeps its head and tail.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from schemas import FunctionCall, SessionEvent, ToolCall
from streams.context.assembly import AssemblyOptions, assemble
from streams.context.fitting import fit
from streams.context.recall_tools import RecallCapabilities, RecallExecutor
from streams.context.tailoring import DROPPED_MARK
from streams.context.validity import assert_valid
from streams.rules.tokens import ScriptAwareTokenCounter
from tests.unit.context.memory_reader import InMemoryReadAPI
from tests.unit.context.oracle import marker, unaccounted
from tests.unit.context.sessions import Session

COUNTER = ScriptAwareTokenCounter()
LOAD = RecallCapabilities(search=True, load=True)


class Markers:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> str:
        self.n += 1
        return marker(self.n)


def _big(mk: Markers, size: int) -> str:
    """A pasted CJK text with a marker at its head, in its middle and at its tail."""
    return f"{mk()}开头" + "数据分析结果" * size + f"中间{mk()}" + "表格内容" * size + f"结尾{mk()}"


def _huge_arguments(rounds: int, size: int) -> Session:
    s, mk = Session(), Markers()
    for r in range(rounds):
        s.turn(f"r{r}").user(f"请把报告写进文件 {mk()}")
        args = json.dumps({"path": f"报告{r}.md", "content": _big(mk, size)}, ensure_ascii=False)
        s.call((f"c{r}", "write_file", args))
        s.result(f"c{r}", f"已写入 {mk()}")
        s.answer(f"写好了 {mk()}")
    s.turn("now").user(f"下一步呢？{mk()}")
    return s


def _huge_messages(rounds: int, size: int) -> Session:
    s, mk = Session(), Markers()
    for r in range(rounds):
        s.turn(f"r{r}").user(f"帮我看看这段日志：{_big(mk, size)}")
        s.answer(f"日志的要点是 {_big(mk, size // 4)}")
    s.turn("now").user(f"还有这一段：{_big(mk, size)}")  # the current message is huge too
    return s


def _many_rounds(rounds: int) -> Session:
    s, mk = Session(), Markers()
    for r in range(rounds):
        s.turn(f"r{r}").user(f"第{r}个问题 {mk()} " + "细节" * 30)
        s.call((f"c{r}", "lookup", json.dumps({"q": f"{mk()} 查询"}, ensure_ascii=False)))
        s.result(f"c{r}", f"结果 {mk()} " + "数字" * 30)
        s.answer(f"答复 {mk()} " + "说明" * 30)
    return s


async def _page(executor: RecallExecutor, event_id: str, call: int | None) -> str:
    """The event's text (``call`` ``None``) or one call's arguments, read back by paging ``session_load``."""
    offset: int | None = 0
    text, field = "", "content" if call is None else "arguments"
    while offset is not None:  # the text and the calls' arguments are one stream: follow the anchor's pages
        args = json.dumps({"event_id": event_id, "content_offset": offset, "content_limit": 4096})
        msg = await executor.execute(ToolCall(id="load", function=FunctionCall(name="session_load", arguments=args)))
        anchor = next(m for m in json.loads(msg.content or "{}")["messages"] if m["anchor"])
        part: dict[str, Any] = anchor if call is None else anchor["tool_calls"][call]
        text += part[field]
        offset = anchor.get("next_content_offset")
    return text


async def _check(s: Session, budget: int) -> tuple[list[dict[str, Any]], str]:
    options = AssemblyOptions(token_budget=budget, token_counter=COUNTER, recall=LOAD)
    fitted = fit(lambda o: assemble("你是助手。", None, s.events, options=o), options)
    messages = fitted.request.messages
    assert_valid(messages)
    assert unaccounted(messages, s.events) == []
    text = "\n".join(str(m) for m in messages)
    executor = RecallExecutor(InMemoryReadAPI(s.events), app_name="app", user_id="u1", session_id="s1")
    for event in s.events:
        markers = re.findall(r"标记\d{4}号", str(event.message.model_dump()))
        if all(m in text for m in markers):
            continue
        # named by a note: session_load gives it back whole
        assert await _page(executor, event.event_id, None) == (event.message.content or ""), event.event_id
        for i, call in enumerate(event.message.tool_calls):
            assert await _page(executor, event.event_id, i) == call.function.arguments, event.event_id
    for m in messages:
        for call in m.get("tool_calls") or ():
            json.loads(call["function"]["arguments"])  # still JSON for the API
    return messages, text


async def test_huge_tool_call_arguments_are_cut_before_any_round_is_dropped() -> None:
    s = _huge_arguments(rounds=3, size=1500)
    messages, text = await _check(s, budget=4000)
    assert DROPPED_MARK not in text and len([m for m in messages if m["role"] == "user"]) == 4
    assert "characters cut from the middle of these tool-call arguments" in text


async def test_huge_pasted_messages_are_cut_and_the_current_one_keeps_head_and_tail() -> None:
    s = _huge_messages(rounds=3, size=1500)
    messages, text = await _check(s, budget=5000)
    assert DROPPED_MARK not in text and len([m for m in messages if m["role"] == "user"]) == 4
    current = messages[-1]["content"]
    original = s.events[-1].message.content or ""
    assert current.startswith(original[:40]) and current.endswith(original[-40:])
    assert "characters cut from the middle of this message" in current


@pytest.mark.parametrize("budget", [900, 1500])
async def test_rounds_dropped_as_a_last_resort_are_named_in_the_latest_user_turn(budget: int) -> None:
    s = _many_rounds(rounds=12)
    messages, _ = await _check(s, budget=budget)
    assert messages[0]["role"] == "system" and DROPPED_MARK not in messages[0]["content"]
    note = [m for m in messages if m["role"] == "user"][-1]["content"]
    assert note.startswith(DROPPED_MARK) and note.endswith(s.events[-4].message.content or "")
    assert "e1," in note and "session_load(event_id=...)" in note


def test_the_note_of_dropped_rounds_is_counted_in_the_budget() -> None:
    s = _many_rounds(rounds=12)
    options = AssemblyOptions(token_budget=1500, token_counter=COUNTER, recall=LOAD)
    fitted = fit(lambda o: assemble("你是助手。", None, s.events, options=o), options)
    report = fitted.request.report
    assert fitted.needs_summary and report.tailored_event_ids and not report.over_budget
    assert report.prompt_tokens <= 1500


def _as(event: SessionEvent, content: str) -> SessionEvent:
    return event.model_copy(update={"message": event.message.model_copy(update={"content": content})})


async def test_a_current_message_alone_over_the_budget_is_cut_but_never_to_nothing() -> None:
    s = Session()
    s.turn("now").user("x")
    s.events[-1] = _as(s.events[-1], f"{marker(1)}" + "很长的问题" * 4000 + f"{marker(2)}")
    messages, _ = await _check(s, budget=300)
    current = messages[-1]["content"]
    assert marker(1) in current and marker(2) in current
