"""Summary injection: system merge vs insert, user-mode fallbacks, formatters, options."""

from __future__ import annotations

from schemas import Message
from streams.context import AssemblyOptions, RecallCapabilities, assemble
from streams.context.history import RUNS_LEFT_OUT_MARK
from streams.context.injection import (
    SUMMARY_TAG,
    default_system_format,
    default_user_format,
    merge_into_system,
    place_in_user_turn,
)
from tests.unit.context.sessions import Session, summary_at

SYSTEM = AssemblyOptions(add_session_summary=True)
USER = AssemblyOptions(add_session_summary=True, injection_mode="user")


def _session() -> Session:
    s = Session()
    s.turn("r1").user("old question")
    s.answer("old answer")
    s.turn("r2").user("newer question")
    s.answer("newer answer")
    return s


def test_default_wrappers_carry_the_tagged_block_and_the_precedence_note() -> None:
    for text in (default_system_format("S"), default_user_format("S")):
        assert f"<{SUMMARY_TAG}>\nS\n</{SUMMARY_TAG}>" in text
        assert "current conversation" in text or "messages that follow" in text
    assert "your earlier exchanges" in default_system_format("S")
    assert "Background" in default_user_format("S")


def test_system_mode_merges_into_the_system_prompt() -> None:
    s = _session()
    req = assemble("You are helpful.", summary_at(s.events[1], "SUMMARY"), s.events, "hi", options=SYSTEM)
    systems = [m for m in req.messages if m["role"] == "system"]
    assert len(systems) == 1 and req.messages[0] is systems[0]
    assert systems[0]["content"].startswith("You are helpful.\n\n")
    assert "SUMMARY" in systems[0]["content"]
    assert [m["content"] for m in req.messages[1:]] == ["newer question", "newer answer", "hi"]


def test_system_mode_inserts_a_system_message_when_there_is_none() -> None:
    s = _session()
    req = assemble("", summary_at(s.events[1], "SUMMARY"), s.events, "hi", options=SYSTEM)
    assert req.messages[0]["role"] == "system"
    assert req.messages[0]["content"] == default_system_format("SUMMARY")


def test_merge_into_empty_system_message_sets_it() -> None:
    out = merge_into_system([Message(role="system", content="")], "B")
    assert [m.content for m in out] == ["B"]


def test_user_mode_prepends_to_first_user_message_of_history() -> None:
    s = _session()
    req = assemble("sys", summary_at(s.events[1], "SUMMARY"), s.events, "hi", options=USER)
    assert req.messages[0] == {"role": "system", "content": "sys"}
    first_user = req.messages[1]
    assert first_user["content"] == default_user_format("SUMMARY") + "\n\nnewer question"


def test_user_mode_merges_into_current_message_when_history_has_no_user() -> None:
    s = _session()
    req = assemble("sys", summary_at(s.events[3], "SUMMARY"), s.events, "hi", options=USER)
    assert [m["role"] for m in req.messages] == ["system", "user"]
    assert req.messages[1]["content"].endswith("\n\nhi")


def test_user_mode_falls_back_to_prefix_user_message_then_standalone() -> None:
    history = [Message(role="assistant", content="a")]
    prefix = [Message(role="user", content="injected context")]
    new_prefix, new_history = place_in_user_turn(prefix, history, "B")
    assert new_prefix[-1].content == "injected context\n\nB"
    assert new_history == history
    new_prefix, new_history = place_in_user_turn([], history, "B")
    assert new_prefix == []
    assert [(m.role, m.content) for m in new_history] == [("user", "B"), ("assistant", "a")]


def test_custom_formatter_applies_in_both_modes() -> None:
    s = _session()

    def fmt(text: str) -> str:
        return f"## Previous Context\n\n{text}"

    for mode in ("system", "user"):
        opts = AssemblyOptions(add_session_summary=True, injection_mode=mode, summary_formatter=fmt)
        req = assemble("sys", summary_at(s.events[1], "SUMMARY"), s.events, "hi", options=opts)
        joined = "\n".join(str(m["content"]) for m in req.messages)
        assert "## Previous Context\n\nSUMMARY" in joined
        assert SUMMARY_TAG not in joined


def test_empty_summary_text_injects_nothing_and_keeps_all_history() -> None:
    s = _session()
    req = assemble("sys", summary_at(s.events[1], "   "), s.events, "hi", options=SYSTEM)
    assert req.messages[0]["content"] == "sys"
    assert len(req.messages) == 6
    assert not req.report.summary_injected


def test_summary_off_uses_max_history_runs_and_ignores_the_summary() -> None:
    s = _session()
    opts = AssemblyOptions(add_session_summary=False, max_history_runs=2)
    req = assemble("sys", summary_at(s.events[1], "SUMMARY"), s.events, "hi", options=opts)
    assert [m["content"] for m in req.messages[:3]] == ["sys", "newer question", "newer answer"]
    all_runs = assemble("sys", None, s.events, "hi", options=AssemblyOptions(max_history_runs=0))
    assert len(all_runs.messages) == 6 and not all_runs.report.runs_left_out


def test_the_runs_max_history_runs_leaves_out_are_named_not_dropped_silently() -> None:
    # Go drops them without a word; with summaries off nothing else holds them in the request.
    s = _session()
    s.turn("r3").user("第三个问题：去里斯本的航班")
    s.answer("好")
    req = assemble("sys", None, s.events, "接着说", options=AssemblyOptions(max_history_runs=2))
    assert [m["content"] for m in req.messages[1:-1]] == ["第三个问题：去里斯本的航班", "好"]
    assert req.report.runs_left_out == ("e1", "e2", "e3", "e4")
    note, _, asked = req.messages[-1]["content"].rpartition("\n\n")
    assert asked == "接着说" and note.startswith(RUNS_LEFT_OUT_MARK) and "event_id=e1, e2, e3, e4" in note
    recall = AssemblyOptions(max_history_runs=2, recall=RecallCapabilities(search=True, load=True))
    recalled = assemble("sys", None, s.events, "接着说", options=recall)
    assert "session_load(event_id=...) returns them" in recalled.messages[-1]["content"]


def test_summary_on_ignores_max_history_runs() -> None:
    s = _session()
    opts = AssemblyOptions(add_session_summary=True, max_history_runs=1)
    req = assemble("sys", summary_at(s.events[0], "SUMMARY"), s.events, "hi", options=opts)
    assert [m["content"] for m in req.messages[1:]] == [
        "old question",
        "old answer",
        "newer question",
        "newer answer",
        "hi",
    ]


def test_a_formatter_that_renders_nothing_cuts_nothing() -> None:
    # The summary is the only copy of the history before its boundary: not shown, nothing may be cut.
    s = Session()
    s.turn("r1").user("旧问题 MARK-1")
    s.answer("旧回答 MARK-2")
    s.turn("r2").user("newer MARK-3")
    s.answer("newer MARK-4")
    summary = summary_at(s.events[1], "SUMMARY covering MARK-1 MARK-2")
    for mode in ("system", "user"):
        for fmt in (lambda _t: "", lambda _t: " \n\t "):
            opts = AssemblyOptions(add_session_summary=True, injection_mode=mode, summary_formatter=fmt)
            req = assemble("sys", summary, s.events, "hi", options=opts)
            joined = "\n".join(str(m["content"]) for m in req.messages)
            assert all(f"MARK-{i}" in joined for i in range(1, 5)), (mode, joined)
            assert "SUMMARY" not in joined
            assert not req.report.summary_injected and req.report.covered_events == 0
            assert req.messages[0] == {"role": "system", "content": "sys"}
