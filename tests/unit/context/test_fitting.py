"""Fitting a request into the window: payloads are cut (naming the event) before rounds are dropped."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable

import pytest

from streams.context.assembly import AssembledRequest, AssemblyOptions, assemble
from streams.context.compaction import CompactionConfig
from streams.context.fitting import (
    MIN_CUT_TOKENS,
    cut_plan,
    cut_thresholds,
    fit,
    model_window,
    refresh_threshold,
    request_budget,
    with_payload_cuts,
)
from streams.context.payload_cuts import PayloadPeaks
from streams.context.recall_tools import RecallCapabilities
from tests.support.markers import MarkerBook
from tests.unit.context.sessions import Session

CUT_NAMES = re.compile(r"event_id=([^;]+);")


def test_window_and_budget() -> None:
    assert model_window(5000, "gpt-4o") == 5000
    assert model_window(None, "gpt-4o-2024-08-06") == 128000
    assert model_window(None, "unknown-model") == 8192
    assert request_budget(8192, 2048) == 6144
    assert request_budget(3000, 2048) == 1500  # the reply's room is at most half the window
    assert request_budget(3000, -5) == 3000


def test_refresh_threshold_is_gos_clamp() -> None:
    assert refresh_threshold(8192, 0.7) == 5734
    assert refresh_threshold(2500, 0.5) == 2000  # the floor
    assert refresh_threshold(1500, 0.5) == 1500  # never above the window


def test_cut_thresholds_halve_down_to_the_floor() -> None:
    assert cut_thresholds(4000) == [1000, 500, 250, 125]
    assert cut_thresholds(100) == [MIN_CUT_TOKENS]


def test_payload_cuts_leave_passes_0_and_1_off_when_compaction_is_off() -> None:
    off = CompactionConfig(keep_tool_names=frozenset({"session_load"}))
    cut = with_payload_cuts(off, 300)
    assert cut.enabled and cut.oversized_tool_result_max_tokens == 300
    assert cut.tool_result_max_tokens == 0 and not cut.force_clean_tool_names
    assert cut.keep_tool_names == {"session_load"}
    on = CompactionConfig(enabled=True, oversized_tool_result_max_tokens=200, force_clean_tool_names=frozenset({"x"}))
    assert with_payload_cuts(on, 300).oversized_tool_result_max_tokens == 200  # its own, smaller one stays
    assert with_payload_cuts(on, 100).force_clean_tool_names == {"x"}


def _session(book: MarkerBook, rounds: int, size: int) -> Session:
    """Rounds of a question and one large tool result, markers at the head and in the middle (glued to CJK)."""
    s = Session()
    for n in range(rounds):
        s.turn(f"r{n}")
        e = s.user("placeholder")
        s.events[-1] = e.model_copy(update={"message": e.message.model_copy(
            update={"content": f"天气怎么样 {book.mint(e.event_id)}"})})  # fmt: skip
        s.call((f"c{n}", "fetch"))
        eid = f"e{len(s.events) + 1}"
        head, middle = book.mint(eid), book.mint(eid)
        s.result(f"c{n}", json.dumps({"ref": head, "body": "数据" * (size // 2) + f"中间{middle}" + "尾" * size},
                                     ensure_ascii=False))  # fmt: skip
        s.answer(f"done {n}")
    return s


def _build(s: Session) -> Callable[[AssemblyOptions], AssembledRequest]:
    return lambda o: assemble("sys", None, s.events, options=o)


def test_tailoring_alone_drops_rounds_fit_cuts_payloads_instead() -> None:
    book = MarkerBook()
    s = _session(book, rounds=4, size=3000)
    options = AssemblyOptions(token_budget=3000, recall=RecallCapabilities(search=True, load=True))
    plain = assemble("sys", None, s.events, options=options)
    assert plain.report.tailored_messages > 0  # what the model would lose without fitting

    fitted = fit(_build(s), options)
    assert not fitted.needs_summary and fitted.dropped_messages == 0
    assert fitted.cut_tokens is not None and fitted.request.report.prompt_tokens <= 3000
    text = json.dumps(fitted.request.messages, ensure_ascii=False)
    named = set(CUT_NAMES.findall(text))
    for event_id, markers in book.by_event.items():
        for marker in markers:
            assert marker in text or event_id in named, (event_id, marker)
    assert "characters cut from the middle of this tool result" in text and ") returns it whole]" in text


def test_fit_keeps_the_largest_threshold_that_fits() -> None:
    s = _session(MarkerBook(), rounds=2, size=3000)
    options = AssemblyOptions(token_budget=2500)  # two results of ~1500 tokens each
    fitted = fit(_build(s), options)
    assert fitted.cut_tokens == cut_thresholds(2500)[0] and not fitted.needs_summary


def test_what_no_cut_can_fit_needs_a_summary() -> None:
    s = _session(MarkerBook(), rounds=30, size=400)
    options = AssemblyOptions(token_budget=1200)
    fitted = fit(_build(s), options)
    assert fitted.needs_summary and fitted.dropped_messages > 0
    assert fitted.cut_tokens is not None  # the payloads were cut as far as it goes first


@pytest.mark.parametrize("budget", [None, 100_000])
def test_a_request_that_fits_is_left_alone(budget: int | None) -> None:
    s = _session(MarkerBook(), rounds=3, size=3000)
    options = AssemblyOptions(token_budget=budget)
    fitted = fit(_build(s), options)
    assert fitted.cut_tokens is None and not fitted.needs_summary
    assert fitted.request.messages == assemble("sys", None, s.events, options=options).messages


def test_configured_compaction_is_kept_while_cutting() -> None:
    s = _session(MarkerBook(), rounds=4, size=3000)
    options = AssemblyOptions(token_budget=3000, compaction=CompactionConfig(enabled=True, tool_result_max_tokens=50))
    fitted = fit(_build(s), options)
    assert fitted.request.report.compaction.placeholders > 0  # Pass 1 still ran
    assert not fitted.needs_summary
    assert dataclasses.replace(options).compaction.oversized_tool_result_max_tokens == 0  # options not mutated


def _one_huge_argument(results: int) -> Session:
    """One call with ~6,000 tokens of CJK arguments, then ``results`` rounds each with a ~300-token result."""
    s = Session()
    s.turn("big").user("把这份报告写进文件")
    s.call(("w", "write_file", json.dumps({"text": "报告正文" * 6000}, ensure_ascii=False)))
    s.result("w", "ok")
    for r in range(results):
        s.turn(f"r{r}").user(f"第{r}个文件里有什么？")
        s.call((f"c{r}", "read_file", "{}"))
        s.result(f"c{r}", "内容 " * 400)
        s.answer("看完了")
    return s


def test_the_largest_payloads_are_cut_first_whatever_their_kind() -> None:
    """One huge argument is cut before any ordinary tool result (README: "largest payloads first")."""
    s = _one_huge_argument(results=20)
    builds: list[AssemblyOptions] = []

    def build(options: AssemblyOptions) -> AssembledRequest:
        builds.append(options)
        return assemble("sys", None, s.events, options=options)

    options = AssemblyOptions(token_budget=10_000, recall=RecallCapabilities(load=True))
    fitted = fit(build, options)
    report = fitted.request.report
    assert not fitted.needs_summary and report.payload_cuts.arguments == 1
    assert report.compaction.truncated == 0  # every ~300-token result is whole
    assert len(builds) <= 1 + len(cut_thresholds(10_000))


@pytest.mark.parametrize("budget", [32_000, 1_000_000])
def test_each_threshold_cuts_every_kind_above_it_in_one_build(budget: int) -> None:
    plan = cut_plan(budget)
    assert [tokens for tokens, _ in plan] == cut_thresholds(budget)
    assert all(c.arguments_max_tokens == c.message_max_tokens == t for t, c in plan)
    peaks = PayloadPeaks(tool_result=300, arguments=5000, message=0)
    assert [(t, c.arguments_max_tokens, c.message_max_tokens) for t, c in cut_plan(budget, peaks)] == [
        (t, t if t < 5000 else 0, 0) for t in cut_thresholds(budget) if t < 5000
    ]
