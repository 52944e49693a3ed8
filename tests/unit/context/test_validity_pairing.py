"""The validity checker catches each rule, and the pairing repair restores it."""

from __future__ import annotations

import re
from typing import Any

import pytest

from schemas import Message
from streams.context import AssemblyOptions, assemble
from streams.context.items import HistoryItem, to_chat_message
from streams.context.notes import NOTE_IDS_LISTED
from streams.context.pairing import REPLACED_MARK, ReplacedResult, repair_pairing
from streams.context.validity import InvalidMessages, assert_valid, find_violations
from streams.rules.tokens import ScriptAwareTokenCounter
from tests.unit.context.oracle import marker, unaccounted
from tests.unit.context.sessions import Session


def call(*ids: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids],
    }


def result(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": "r"}


SYS = {"role": "system", "content": "s"}
USER = {"role": "user", "content": "u"}


def test_valid_list_has_no_violations() -> None:
    assert (
        find_violations([SYS, USER, call("a", "b"), result("b"), result("a"), {"role": "assistant", "content": "x"}])
        == []
    )
    assert find_violations([USER]) == []


@pytest.mark.parametrize(
    ("messages", "fragment"),
    [
        ([], "empty"),
        ([USER, SYS], "not first"),
        ([SYS, SYS, USER], "2 system messages"),
        ([USER, result("a")], "does not follow an assistant call"),
        ([USER, call("a"), USER], "have no result before"),
        ([USER, call("a")], "have no result at the end"),
        ([USER, call("a"), result("b")], "does not answer an open call"),
        ([USER, call("a"), result("a"), result("a")], "does not answer an open call"),
        ([USER, {"role": "assistant", "content": ""}], "empty assistant turn"),
        ([USER, call("a", "a"), result("a")], "duplicate tool call ids"),
        ([USER, {"role": "bot", "content": "x"}], "unknown role"),
    ],
)
def test_each_rule_is_detected(messages: list[dict[str, Any]], fragment: str) -> None:
    problems = find_violations(messages)
    assert any(fragment in p for p in problems), problems
    with pytest.raises(InvalidMessages):
        assert_valid(messages)


def test_require_system() -> None:
    assert find_violations([USER], require_system=True) == ["no system message"]


def _item(msg: dict[str, Any]) -> HistoryItem:
    return HistoryItem(Message.model_validate(msg))


def _repair(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out, _ = repair_pairing([_item(x) for x in messages])
    return [to_chat_message(i.message) for i in out]


def test_repair_moves_late_results_next_to_their_call() -> None:
    fixed = _repair([USER, call("a", "b"), result("a"), USER, result("b")])
    assert [x["role"] for x in fixed] == ["user", "assistant", "tool", "tool", "user"]
    assert find_violations(fixed) == []


def test_repair_strips_pending_calls_and_drops_emptied_turns() -> None:
    out, report = repair_pairing([_item(USER), _item(call("a", "b")), _item(result("a")), _item(call("p"))])
    fixed = [to_chat_message(i.message) for i in out]
    assert [c["id"] for c in fixed[1]["tool_calls"]] == ["a"]
    assert len(fixed) == 3
    assert (report.unanswered_calls, report.emptied_assistant_turns) == (2, 1)


def test_repair_keeps_assistant_text_when_its_calls_are_pending() -> None:
    msg = call("p") | {"content": "let me check"}
    fixed = _repair([USER, msg])
    assert fixed[-1] == {"role": "assistant", "content": "let me check"}


def test_repair_drops_orphans() -> None:
    out, report = repair_pairing([_item(x) for x in [USER, result("z"), call("a"), result("a")]])
    assert len(out) == 3
    assert report.orphan_results == 1


def test_second_result_of_a_call_replaces_the_first_in_its_place() -> None:
    pending = HistoryItem(Message(role="tool", tool_call_id="a", content="pending"), event_id="e3")
    final = HistoryItem(Message(role="tool", tool_call_id="a", content="done PNR-7Q2"), event_id="e5")
    note = _item({"role": "assistant", "content": "still running"})
    out, report = repair_pairing([_item(USER), _item(call("a")), pending, note, final])
    fixed = [to_chat_message(i.message) for i in out]
    assert [x["role"] for x in fixed] == ["user", "assistant", "tool", "assistant"]
    assert fixed[2]["content"].startswith("done PNR-7Q2")
    assert REPLACED_MARK in fixed[2]["content"] and "event_id=e3" in fixed[2]["content"]
    assert report.replaced_results == [ReplacedResult("a", "e3", "e5")]
    assert find_violations(fixed) == []


def test_reused_call_id_pairs_with_the_latest_open_call() -> None:
    fixed = _repair([USER, call("a"), USER, call("a"), result("a")])
    assert [x["role"] for x in fixed] == ["user", "user", "assistant", "tool"]
    assert find_violations(fixed) == []


def test_final_result_of_a_long_running_call_is_in_the_request() -> None:
    s = Session()
    s.turn("r1").user(f"book me a flight {marker(1)}")
    s.call(("c1", "book_flight"))
    s.result("c1", f'{{"status": "pending", "m": "{marker(3)}"}}', name="book_flight")
    s.answer(f"booking is in progress {marker(4)}")
    s.result("c1", f'{{"status": "done", "pnr": "{marker(5)}"}}', name="book_flight")
    s.turn("r2").user(f"what is my booking code? {marker(6)}")
    req = assemble("sys", None, s.events, None)
    assert marker(5) in str(req.messages)
    assert unaccounted(req.messages, s.events) == []
    assert req.report.pairing.replaced_results == [ReplacedResult("c1", "e3", "e5")]


@pytest.mark.parametrize("answers", [2, 3])
def test_a_replaced_result_is_named_when_tailoring_drops_the_result_that_replaced_it(answers: int) -> None:
    """Only the kept result's note named the result it replaced; dropping the kept one dropped that name too.

    A pending result, then the final one(s), in a round tailoring drops: the request's note names every
    result of the call (in log order, so its range of ids holds them), not only the one it kept.
    """
    s = Session()
    s.turn("r1").user(f"book me a flight {marker(1)}")
    s.call(("c1", "book_flight"))
    for n in range(answers):
        s.result("c1", f'{{"status": "step {n}", "m": "{marker(10 + n)}"}}', name="book_flight")
        if n == 0:
            s.answer(f"booking is in progress {marker(2)}")
    s.turn("r2").user(f"what is my booking code? {marker(3)} " + "详细说明" * 60)
    options = AssemblyOptions(token_budget=260, token_counter=ScriptAwareTokenCounter())
    req = assemble("sys", None, s.events, None, options=options)
    assert req.report.tailored_messages
    results = [e.event_id for e in s.events if e.message.role == "tool"]
    assert set(results) <= set(req.report.tailored_event_ids)
    assert unaccounted(req.messages, s.events) == []


def test_a_call_without_result_and_a_result_without_call_are_named_in_the_request() -> None:
    """The pairing repair leaves them out (the API refuses them); the request names their events.

    Neither is in a summary (both lie after the boundary): without a note naming their events the
    model would never learn the call was made (a tool cancelled mid-reply: its call's arguments) or
    what the result said (its call published under a name the request cannot show).
    """
    s = Session()
    s.turn("r1").user(f"订两张去杭州的票 {marker(1)}")
    s.add("assistant", content=None, tool_calls=[
        {"id": "c1", "type": "function", "function": {"name": "search", "arguments": f'{{"q": "{marker(2)}"}}'}},
        {"id": "c2", "type": "function", "function": {"name": "book", "arguments": f'{{"seat": "{marker(3)}"}}'}},
    ])  # fmt: skip
    s.result("c1", f"两个车次 {marker(4)}", name="search")  # c2 was cancelled: no result
    s.add("assistant", content=None, tool_calls=[
        {"id": "c3", "type": "function", "function": {"name": "", "arguments": f'{{"city": "{marker(5)}"}}'}},
    ])  # fmt: skip
    s.result("c3", f"天气晴 {marker(6)}")  # its call has no name: the request cannot show it
    s.add("tool", content=f"没有调用编号的结果 {marker(9)}")  # no tool_call_id: the request cannot show it
    s.answer(f"好的 {marker(7)}")
    s.turn("r2").user(f"然后呢？ {marker(8)}")
    req = assemble("sys", None, s.events, None)
    assert find_violations(req.messages) == []
    assert unaccounted(req.messages, s.events) == []
    cancelled = s.events[1].model_copy(update={"message": s.events[1].message.model_copy(
        update={"tool_calls": s.events[1].message.tool_calls[1:]})})  # fmt: skip
    assert unaccounted(req.messages, [cancelled]) == [], "the cancelled call's arguments are shown or named"


@pytest.mark.parametrize("pending", [5, 12, 60])
def test_every_call_left_out_is_named_in_the_request_not_only_in_the_report(pending: int) -> None:
    """Calls still pending in many rounds (a tool that never answers): each is left out of the request.

    The note named the first four and ``and N more``: the newest ones — the calls the model made last —
    were named only in ``report.pairing.left_out``. Each is named now, up to the note's bound, and the
    older ones past it by the range of the log they lie in.
    """
    s = Session()
    for r in range(pending):
        s.turn(f"r{r}").user(f"第{r}个任务 {marker(3 * r + 1)}")
        s.call((f"c{r}", "slow_job", f'{{"task": "{marker(3 * r + 2)}"}}'))  # never answered
        s.answer(f"已提交 {marker(3 * r + 3)}")
    s.turn("last").user("进度如何？")
    req = assemble("sys", None, s.events, None)
    assert find_violations(req.messages) == []
    calls = [e.event_id for e in s.events if e.message.tool_calls]
    assert req.report.pairing.left_out == calls
    assert unaccounted(req.messages, s.events) == []
    text = str(req.messages)
    listed = re.search(r"event_id=((?:[\w-]+, )*[\w-]+)", text)
    assert listed is not None and listed.group(1).split(", ") == calls[-NOTE_IDS_LISTED:], "each of the newest named"
    older = calls[:-NOTE_IDS_LISTED]
    assert not older or f"and {len(older)} older ones logged from {older[0]} to {older[-1]}" in text
