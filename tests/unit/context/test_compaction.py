"""Tool-result compaction: thresholds, protections, placeholders, markers."""

from __future__ import annotations

import json
import re

import pytest

from streams.context import AssemblyOptions, assemble
from streams.context.compaction import (
    ARGUMENTS_PLACEHOLDER,
    PLACEHOLDER_MARK,
    CompactionConfig,
    RecoveryHint,
    compact,
    policy_placeholder,
    truncate_middle,
)
from streams.context.history import project_history
from streams.context.items import HistoryItem
from streams.rules.tokens import SimpleTokenCounter
from tests.unit.context.oracle import marker, unaccounted
from tests.unit.context.sessions import Session, summary_at

COUNTER = SimpleTokenCounter()
BIG = "x" * 4096  # 1024 simple tokens
HUGE = "y" * 8000  # 2000 simple tokens


def _three_requests(name: str = "fetch") -> Session:
    s = Session()
    for n in range(3):
        s.turn(f"r{n}")
        s.user(f"q{n}")
        s.call((f"c{n}", name))
        s.result(f"c{n}", HUGE)
        s.answer(f"a{n}")
    return s


def _run(
    s: Session, config: CompactionConfig, current: str | None = "req:r2", session_load: bool = False
) -> list[HistoryItem]:
    items = project_history(s.events, None).items
    out, _ = compact(items, config, COUNTER, current_unit=current, session_load=session_load)
    return out


def _results(items: list[HistoryItem]) -> list[str]:
    return [i.message.content or "" for i in items if i.message.role == "tool"]


ON = CompactionConfig(enabled=True, keep_recent_requests=0)


def test_disabled_by_default_changes_nothing() -> None:
    s = _three_requests()
    assert _results(_run(s, CompactionConfig(oversized_tool_result_max_tokens=10))) == [HUGE] * 3


def test_pass1_replaces_historical_results_and_keeps_ids() -> None:
    s = _three_requests()
    out = _run(s, ON)
    first, second, current = _results(out)
    assert first.startswith(PLACEHOLDER_MARK) and second.startswith(PLACEHOLDER_MARK)
    assert current == HUGE
    tool0 = next(i for i in out if i.message.role == "tool")
    assert tool0.message.tool_call_id == "c0"
    for line in ("event_id: e3", "tool_call_id: c0", "tool_name: fetch", "reason: historical_compaction"):
        assert line in first
    assert "already ran and succeeded" in first
    assert "Do not repeat tools that change state" in first


def test_pass1_threshold_is_strict() -> None:
    s = Session()
    s.turn("r0").user("q")
    s.call(("c0", "f"))
    s.result("c0", BIG)  # exactly 1024 tokens: not above the default max
    s.answer("a")
    s.turn("r1").user("q1")
    assert _results(_run(s, ON, current="req:r1")) == [BIG]
    assert _results(
        _run(s, CompactionConfig(enabled=True, keep_recent_requests=0, tool_result_max_tokens=1023), current="req:r1")
    )[0].startswith(PLACEHOLDER_MARK)


def test_recent_completed_requests_are_protected() -> None:
    s = _three_requests()
    out = _run(s, CompactionConfig(enabled=True, keep_recent_requests=1))
    first, second, current = _results(out)
    assert first.startswith(PLACEHOLDER_MARK)
    assert second == HUGE and current == HUGE


def test_only_completed_units_count_as_recent() -> None:
    s = _three_requests()
    s.turn("r3").user("q3")
    s.call(("c3", "fetch"))
    s.result("c3", HUGE)  # r3 never answered: not "completed"
    s.turn("r4").user("now")
    out = _run(s, CompactionConfig(enabled=True, keep_recent_requests=1), current="req:r4")
    results = _results(out)
    assert results[2] == HUGE  # r2 is the newest completed request
    assert results[3].startswith(PLACEHOLDER_MARK)


def test_no_pass1_without_current_unit() -> None:
    s = _three_requests()
    assert _results(_run(s, ON, current=None)) == [HUGE] * 3


def test_invocation_id_is_the_unit_without_request_id() -> None:
    s = Session()
    s.add("user", content="q0", request_id="", invocation_id="i0")
    s.add("assistant", tool_calls=[{"id": "c0", "function": {"name": "f"}}], request_id="", invocation_id="i0")
    s.add("tool", tool_call_id="c0", content=HUGE, request_id="", invocation_id="i0")
    s.add("user", content="q1", request_id="", invocation_id="i1")
    assert _results(_run(s, ON, current="inv:i1"))[0].startswith(PLACEHOLDER_MARK)
    assert _results(_run(s, ON, current="inv:i0")) == [HUGE]


def test_skip_recent_protects_pass1_but_not_pass2() -> None:
    s = _three_requests()
    config = CompactionConfig(enabled=True, keep_recent_requests=0, skip_recent=6, oversized_tool_result_max_tokens=500)
    first, second, current = _results(_run(s, config))
    assert first.startswith(PLACEHOLDER_MARK)
    assert not second.startswith(PLACEHOLDER_MARK) and "characters cut from the middle" in second
    assert "characters cut from the middle" in current
    assert COUNTER.count_text(second) <= 500


def test_placeholder_not_applied_when_not_smaller() -> None:
    s = _three_requests()
    s.events[2] = s.events[2].model_copy(
        update={"message": s.events[2].message.model_copy(update={"content": "z" * 60})}
    )
    config = CompactionConfig(enabled=True, keep_recent_requests=0, tool_result_max_tokens=10)
    first, second, _ = _results(_run(s, config))
    assert first == "z" * 60  # 15 tokens, but the placeholder is longer
    assert second.startswith(PLACEHOLDER_MARK)


def test_force_clean_only_unprotected_named_tools_and_keep_wins() -> None:
    s = Session()
    for n, name in enumerate(["shell", "grep", "shell", "shell"]):
        s.turn(f"r{n}").user(f"q{n}")
        s.call((f"c{n}", name))
        s.result(f"c{n}", "tiny" if n == 0 else "noise " * 100, name=name)
        s.answer(f"a{n}")
    config = CompactionConfig(
        enabled=True,
        keep_recent_requests=0,
        force_clean_tool_names=frozenset({"shell", "grep"}),
        keep_tool_names=frozenset({"grep"}),
    )
    shell0, grep1, shell2, shell3 = _results(_run(s, config, current="req:r3"))
    assert shell0 == "tiny"  # already smaller than the placeholder
    assert shell2 == policy_placeholder()
    assert "event_id" not in shell2  # no recovery hints in Pass 0
    assert grep1 == "noise " * 100  # keep wins
    assert shell3 == "noise " * 100  # current request


def test_session_load_hint_follows_offered_tools() -> None:
    s = _three_requests()
    with_load = _results(_run(s, ON, session_load=True))[0]
    without = _results(_run(s, ON, session_load=False))[0]
    assert "call session_load" in with_load
    assert "session_load" not in without and "cannot be fetched" in without


def test_current_result_without_event_id_gets_no_load_hint_in_pass2() -> None:
    item = HistoryItem(
        __import__("schemas").Message(role="tool", tool_call_id="c9", name="web", content=HUGE),
        event_id=None,
        request_id="r9",
    )
    out, stats = compact(
        [item],
        CompactionConfig(enabled=True, oversized_tool_result_max_tokens=300),
        COUNTER,
        current_unit="req:r9",
        session_load=True,
    )
    text = out[0].message.content or ""
    assert stats.truncated == 1
    assert "tool_call_id=c9" in text and "session_load" not in text


def test_session_load_results_are_never_truncated() -> None:
    s = Session()
    s.turn("r0").user("q")
    s.call(("c0", "session_load"))
    s.result("c0", HUGE)
    config = CompactionConfig(enabled=True, oversized_tool_result_max_tokens=100)
    assert _results(_run(s, config, current="req:r0")) == [HUGE]


def test_pass2_requires_enabled_and_positive_max() -> None:
    s = _three_requests()
    assert _results(_run(s, CompactionConfig(enabled=False, oversized_tool_result_max_tokens=100))) == [HUGE] * 3
    only_p2 = CompactionConfig(enabled=True, tool_result_max_tokens=0, oversized_tool_result_max_tokens=0)
    assert _results(_run(s, only_p2)) == [HUGE] * 3


def test_pass2_marker_states_cut_characters_and_ids() -> None:
    s = _three_requests()
    config = CompactionConfig(enabled=True, tool_result_max_tokens=0, oversized_tool_result_max_tokens=200)
    current = _results(_run(s, config, session_load=True))[2]
    assert COUNTER.count_text(current) <= 200
    assert current.startswith("y") and current.endswith("y")
    kept = current.count("y")
    removed = 8000 - kept
    assert f"[distill: {removed} characters cut from the middle of this tool result; event_id=e11;" in current
    assert 'tool_call_id=c2; tool_name=fetch; session_load(event_id="e11") returns it whole]' in current


def test_truncate_middle_examples() -> None:
    text = "".join(chr(ord("a") + i % 26) for i in range(500))
    cut = truncate_middle(text, 200)
    head = cut.split("\n\n")[0]
    assert f"[distill: {500 - 2 * len(head)} characters cut from the middle of this tool result]" in cut
    assert len(cut) <= 200 and len(head) > 50
    assert cut.startswith(text[:10]) and cut.endswith(text[-10:])
    short = "0123456789abcdefghij"
    assert truncate_middle(short, 10) == "0123456789"  # no room for a marker: head only
    assert truncate_middle(short, 50) == short


FAMILY = "\U0001f468\u200d\U0001f469\u200d\U0001f467"  # one character on screen, five code points
FLAG = "\U0001f1e8\U0001f1f3"
HINT = RecoveryHint("e1", "c1", "lookup", "oversized")


@pytest.mark.parametrize(
    ("text", "unit"),
    [(FAMILY * 100, FAMILY), ("e\u0301" * 300, "e\u0301"), (FLAG * 200, FLAG), ("한\u11a8" * 300, "한\u11a8")],
)
@pytest.mark.parametrize("hint", [None, HINT])
def test_truncate_middle_never_splits_a_character(text: str, unit: str, hint: RecoveryHint | None) -> None:
    for budget in range(0, 400):
        cut = truncate_middle(text, budget, hint, session_load=True)
        assert len(cut) <= budget or cut.startswith("\n\n[distill:")  # the marker alone may exceed it
        pieces = re.split(r"\n\n\[distill:[^\]]*\]\n\n", cut)
        for piece in pieces:
            assert len(piece) % len(unit) == 0 and piece == unit * (len(piece) // len(unit)), (budget, piece[:4])
        removed = re.search(r"\[distill: (\d+) characters", cut)
        if removed:
            assert int(removed.group(1)) == len(text) - sum(map(len, pieces))


@pytest.mark.parametrize("max_tokens", range(300, 306))
def test_oversized_cjk_result_is_cut_on_characters_and_names_its_event(max_tokens: int) -> None:
    s = Session()
    s.turn("r1").user(f"查一下订单 {marker(1)}")
    s.call(("c1", "lookup"))
    payload = f"{marker(3)} " + ("订单状态正常👨‍👩‍👧" * 400) + " 结束"
    s.result("c1", payload, name="lookup")
    s.answer(f"好的 {marker(4)}")
    opts = AssemblyOptions(compaction=CompactionConfig(enabled=True, oversized_tool_result_max_tokens=max_tokens))
    req = assemble("sys", None, s.events, None, [], opts)
    sent = next(m["content"] for m in req.messages if m["role"] == "tool")
    head, _, rest = sent.partition("\n\n[distill:")
    tail = rest.split("]\n\n", 1)[1]
    assert payload.startswith(head) and payload.endswith(tail) and "event_id=e3" in sent
    assert not head.endswith(("\u200d", "\U0001f468", "\U0001f469")) and not tail.startswith(("\u200d", "\U0001f469"))
    assert unaccounted(req.messages, s.events) == []


def test_negative_settings_read_as_zero() -> None:
    config = CompactionConfig(enabled=True, keep_recent_requests=-1, tool_result_max_tokens=-5, skip_recent=-2)
    assert (config.keep_recent_requests, config.tool_result_max_tokens, config.skip_recent) == (0, 0, 0)


def test_resume_tail_payloads_compacted_only_when_enabled() -> None:
    from streams.context.compaction import compact_resume_tail

    s = Session()
    s.turn("r1", "inv1").user("task")
    s.call(("c1", "write", '{"body": "' + "w" * 5000 + '"}'), ("c2", "read", "{}"))
    s.result("c1", "ok")
    cut = s.result("c2", HUGE)
    s.answer("next step")
    items = project_history(s.events, summary_at(cut).boundary, current_index=0).items
    off, _ = compact_resume_tail(items, CompactionConfig(), COUNTER)
    assert off == items
    on, stats = compact_resume_tail(items, CompactionConfig(enabled=True), COUNTER)
    call = next(i for i in on if i.message.tool_calls).message
    assert [c.function.arguments for c in call.tool_calls] == [ARGUMENTS_PLACEHOLDER, "{}"]
    results = _results(on)
    assert results[0] == "ok"
    assert results[1].startswith(PLACEHOLDER_MARK) and "reason: current_invocation_summary" in results[1]
    assert "tool_call_id: c2" in results[1]
    assert stats.placeholders == 1 and stats.arguments_elided == 1
    # With session_load offered, the elided arguments name the event that load returns them from.
    loadable, _ = compact_resume_tail(items, CompactionConfig(enabled=True), COUNTER, session_load=True)
    call_item = next(i for i in loadable if i.message.tool_calls)
    note = json.loads(call_item.message.tool_calls[0].function.arguments)["_distill_context_note"]
    assert f'session_load(event_id="{call_item.event_id}") returns them' in note


def test_a_reused_call_id_gets_the_tool_of_its_own_turn() -> None:
    """Call ids numbered afresh each turn (``call_0``…) and results that do not carry their tool's name: each
    result is treated as its own call's tool (``keep_tool_names``, ``force_clean_tool_names``) and its
    placeholder names that tool, not the tool of the id's latest call."""
    s = Session()
    for n, name in enumerate(["grep", "shell", "fetch", "shell"]):
        s.turn(f"r{n}").user(f"q{n}")
        s.call(("call_0", name))
        s.result("call_0", "noise " * 100)
        s.answer(f"a{n}")
    config = CompactionConfig(
        enabled=True,
        keep_recent_requests=0,
        tool_result_max_tokens=10,
        force_clean_tool_names=frozenset({"shell"}),
        keep_tool_names=frozenset({"grep"}),
    )
    grep0, shell1, fetch2, shell3 = _results(_run(s, config, current="req:r3"))
    assert grep0 == "noise " * 100  # kept: its own call is grep's, however the id's latest call is named
    assert shell1 == policy_placeholder()
    assert fetch2.startswith(PLACEHOLDER_MARK) and "tool_name: fetch" in fetch2
    assert shell3 == "noise " * 100  # current request
