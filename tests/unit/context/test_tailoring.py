"""Token tailoring: oldest rounds go first, the system message and latest round stay."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from schemas import Message
from streams.context import AssemblyOptions, InjectionMode, RecallCapabilities, assemble
from streams.context.notes import NOTE_IDS_LISTED, event_list, event_span
from streams.context.pairing import LEFT_OUT_MARK, left_out_note
from streams.context.tailoring import DROPPED_MARK, round_starts, tailor
from streams.rules.tokens import SimpleTokenCounter
from tests.unit.context.sessions import T0, Session, summary_at

COUNTER = SimpleTokenCounter()


def m(role: str, text: str = "", **kw: object) -> Message:
    return Message.model_validate({"role": role, "content": text or None, **kw})


def _body() -> list[Message]:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    return [
        m("user", "u" * 400),  # 100 tokens
        m("assistant", "a" * 400),
        m("user", "v" * 400),
        m("assistant", tool_calls=[call]),
        m("tool", "t" * 400, tool_call_id="c1"),
        m("assistant", "b" * 400),
    ]


def test_round_starts_at_user_messages() -> None:
    assert round_starts(_body()) == [0, 2]
    assert round_starts([]) == []


def test_no_budget_or_fitting_budget_keeps_everything() -> None:
    head = [m("system", "s" * 40)]
    assert tailor(head, _body(), None, COUNTER).dropped == 0
    fits = tailor(head, _body(), 10_000, COUNTER)
    assert fits.dropped == 0 and not fits.over_budget


def test_drops_oldest_round_first_keeping_the_system_message() -> None:
    head = [m("system", "s" * 40)]
    out = tailor(head, _body(), 450, COUNTER)
    assert [x.role for x in out.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert out.dropped == 2 and out.tokens <= 450 and not out.over_budget


def test_latest_round_sheds_oldest_steps_but_keeps_its_question_and_last_step() -> None:
    head = [m("system", "s" * 40)]
    out = tailor(head, _body(), 250, COUNTER)
    assert [x.role for x in out.messages] == ["system", "user", "assistant"]
    assert out.messages[-1].content == "b" * 400
    assert not out.over_budget


def test_reports_over_budget_when_the_minimum_does_not_fit() -> None:
    out = tailor([m("system", "s" * 400)], _body(), 50, COUNTER)
    assert out.over_budget
    assert [x.role for x in out.messages] == ["system", "user", "assistant"]


def test_overhead_counts_against_the_budget() -> None:
    head = [m("system", "s" * 40)]
    assert tailor(head, _body(), 610, COUNTER).dropped == 0
    assert tailor(head, _body(), 610, COUNTER, overhead=100).dropped == 2


def _long_session() -> Session:
    s = Session()
    for n in range(6):
        s.turn(f"r{n}").user(f"question {n} " + "q" * 400)
        s.answer(f"answer {n} " + "a" * 400)
    return s


def test_the_summary_survives_tailoring_in_either_mode() -> None:
    """The summary is the only copy of what lies before its boundary: when rounds must go, it stays
    (Go drops a user-mode summary with the round it was placed in)."""
    s = _long_session()
    summary = summary_at(s.events[1], "SUMMARY-TEXT")
    sys_req = assemble(
        "sys", summary, s.events, "now", options=AssemblyOptions(add_session_summary=True, token_budget=300)
    )
    assert "SUMMARY-TEXT" in sys_req.messages[0]["content"]
    assert sys_req.report.prompt_tokens <= 300
    user_req = assemble(
        "sys",
        summary,
        s.events,
        "now",
        options=AssemblyOptions(add_session_summary=True, injection_mode="user", token_budget=300),
    )
    assert user_req.report.tailored_messages > 0  # rounds did go
    assert user_req.report.summary_injected
    with_summary = [m for m in user_req.messages if "SUMMARY-TEXT" in str(m["content"])]
    assert len(with_summary) == 1 and with_summary[0]["role"] == "user"
    assert user_req.messages[-1]["content"].endswith("now")
    assert user_req.report.prompt_tokens <= 300


def _uuid_session(rounds: int) -> Session:
    """``rounds`` rounds of four events with UUID-long ids (a call, its result, CJK text)."""
    s = Session()
    for r in range(rounds):
        ids = [str(uuid.UUID(int=4 * r + k)) for k in range(4)]
        s.turn(f"r{r}").user(f"第{r}个问题：这个文件里有什么？", event_id=ids[0])
        s.call((f"c{r}", "read_file", '{"n": 1}'), event_id=ids[1])
        s.result(f"c{r}", "文件内容" * 40, event_id=ids[2])
        s.answer(f"第{r}个文件是普通的文本。", event_id=ids[3])
    return s


@pytest.mark.parametrize("budget", [8_000, 32_000])
def test_the_note_of_dropped_rounds_stays_small_and_within_the_budget(budget: int) -> None:
    s = _uuid_session(800)
    options = AssemblyOptions(token_budget=budget, token_counter=COUNTER, recall=RecallCapabilities(load=True))
    request = assemble("你是助手。", None, s.events, options=options)
    report = request.report
    user = [m for m in request.messages if m["role"] == "user"][-1]["content"]
    note = user[: user.index("]") + 1]
    assert note.startswith(DROPPED_MARK) and len(note) < 1_000  # a range and a count, not 3,000 ids
    assert f"({report.tailored_messages} events)" in note
    assert s.events[0].event_id in note and report.tailored_event_ids[-1] in note
    assert not report.over_budget and report.prompt_tokens <= budget
    kept = report.history_messages - report.tailored_messages
    assert kept >= (budget - 200) // 60  # about 45 tokens a message: the room goes to the history


def test_a_note_names_a_few_ids_and_a_count() -> None:
    ids = [f"e{i}" for i in range(1, 101)]
    assert event_span(ids[:3]) == "event_id=e1, e2, e3"
    assert event_span(ids) == "event_id=e1, e2, e3 … e100 (100 events)"

    assert event_list(ids[:10]) == f"event_id={', '.join(ids[:10])}"  # scattered events: each named
    newest = ", ".join(ids[-NOTE_IDS_LISTED:])
    assert event_list(ids) == f"event_id={newest} and 50 older ones logged from e1 to e50 (100 events)"
    note = left_out_note(ids, session_load=True)
    assert note.count("e") < 2_000 and len(note) < 1_000  # bounded: 50 ids, then a range


@pytest.mark.parametrize("mode", ["system", "user"])
def test_notes_leave_the_cached_prefix_alone(mode: InjectionMode) -> None:
    """Requests differing only in their notes (a call pending, then answered; more rounds dropped)
    share the system message and every message before the latest user turn."""
    s = Session()
    s.turn("r0").user("先看看这个文件")
    s.answer("好的，" + "说明" * 400)
    s.turn("r1").user("再查一下天气")
    s.call(("c1", "weather", "{}"))
    pending = [*s.events]
    s.result("c1", "晴")
    answered = [*s.events]
    summary = summary_at(None, "之前聊过的内容", cutoff=T0)
    options = AssemblyOptions(add_session_summary=True, injection_mode=mode, recall=RecallCapabilities(load=True))
    requests = [
        assemble("你是助手。", summary, pending, "今天呢？", options=options),
        assemble("你是助手。", summary, answered, "今天呢？", options=options),
        assemble("你是助手。", summary, answered, "今天呢？", options=replace(options, token_budget=600)),
    ]
    assert LEFT_OUT_MARK in str(requests[0].messages) and LEFT_OUT_MARK not in str(requests[1].messages)
    assert requests[2].report.tailored_messages > 0 and DROPPED_MARK in str(requests[2].messages)
    assert len({r.messages[0]["content"] for r in requests}) == 1
    assert "之前聊过的内容" in str(requests[0].messages[:2])  # the summary is in the prefix
    assert requests[0].messages[:2] == requests[1].messages[:2]
    for request in requests:
        assert request.messages[-1]["content"].endswith("今天呢？")
    assert requests[2].report.prompt_tokens <= 600
