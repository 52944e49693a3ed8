"""Assembling from a context read: a read cut at a summary the request will not show is refused.

The read side cuts at the summary's boundary; a request that does not show the
summary (summaries off, or a formatter that renders nothing) must show the
history before it instead. From a read holding that history it does; from a
read cut at the boundary it raises rather than hide the history silently.
"""

from __future__ import annotations

import pytest

from projections.context_read import applicable_summary
from schemas import SessionEvent, SessionSummary
from schemas.reads import ContextRead, ReadStats
from streams.context import AssemblyOptions, HistoryNotReadError, assemble, assemble_from_read
from streams.context.from_read import READ_CAP_MARK, left_out_by_cap
from streams.context.history import covered_mask
from tests.unit.context.oracle import marker, unaccounted
from tests.unit.context.sessions import Session, summary_at

SUMMARY_OFF = AssemblyOptions(add_session_summary=False)
RENDERS_NOTHING = AssemblyOptions(add_session_summary=True, summary_formatter=lambda _: "")
SUMMARY_ON = AssemblyOptions(add_session_summary=True)


def _session() -> tuple[list[SessionEvent], SessionSummary]:
    s = Session()
    for r in range(3):
        s.turn(f"r{r}").user(f"第{r}个问题 {marker(2 * r + 1)}")
        s.answer(f"第{r}个回答 {marker(2 * r + 2)}")
    return s.events, summary_at(s.events[3], "前两轮的摘要")


def _read(events: list[SessionEvent], summary: SessionSummary, *, full: bool) -> ContextRead:
    """What ``ContextReader.read`` returns: the applicable summary and the tail, or every event."""
    applied = applicable_summary([summary], "")
    assert applied is not None
    covered = covered_mask(events, applied.boundary)
    shown = events if full else [e for e, c in zip(events, covered, strict=True) if not c]
    return ContextRead(app_name="app", user_id="u1", session_id="s1", filter_key="", summary=applied,
                       events=tuple(shown), full_history=full, current_event_id=events[-2].event_id)  # fmt: skip


@pytest.mark.parametrize("options", [SUMMARY_OFF, RENDERS_NOTHING], ids=["summary-off", "renders-nothing"])
def test_a_read_cut_at_a_summary_the_request_will_not_show_is_refused(options: AssemblyOptions) -> None:
    events, summary = _session()
    with pytest.raises(HistoryNotReadError, match="full_history=True"):
        assemble_from_read("sys", _read(events, summary, full=False), options=options)


@pytest.mark.parametrize("options", [SUMMARY_OFF, RENDERS_NOTHING], ids=["summary-off", "renders-nothing"])
def test_a_full_read_shows_every_event_when_the_summary_is_not_shown(options: AssemblyOptions) -> None:
    events, summary = _session()
    got = assemble_from_read("sys", _read(events, summary, full=True), options=options)
    assert unaccounted(got.messages, events) == []
    assert got.messages == assemble("sys", summary, events, events[-2], (), options).messages
    assert not got.report.summary_injected


def test_with_the_summary_shown_a_cut_read_and_a_full_read_build_one_request() -> None:
    events, summary = _session()
    cut = assemble_from_read("sys", _read(events, summary, full=False), options=SUMMARY_ON)
    full = assemble_from_read("sys", _read(events, summary, full=True), options=SUMMARY_ON)
    assert cut.messages == full.messages and cut.report.summary_injected
    assert "前两轮的摘要" in cut.messages[0]["content"]
    assert unaccounted(cut.messages, events[4:]) == []


def _capped(events: list[SessionEvent], summary: SessionSummary, stats: ReadStats) -> ContextRead:
    """A cut read whose cap stopped a scan: no current user message found (``current_event_id`` unset)."""
    read = _read(events, summary, full=False)
    return read.model_copy(update={"stats": stats, "current_event_id": None})


def test_a_scan_back_stopped_by_the_cap_is_noted_only_for_a_request_answering_the_reads_current() -> None:
    """Only the look-back for the current user message stopped (``current_unread``): a request answering a
    new message lacks nothing, so it carries no note; one answering the read's current message says so."""
    events, summary = _session()
    read = _capped(events, summary, ReadStats(current_unread=True))
    new = assemble_from_read("sys", read, "a new question 新问题", options=SUMMARY_ON)
    assert READ_CAP_MARK not in str(new.messages) and not left_out_by_cap(read, answers_read_current=False)
    stored = assemble_from_read("sys", read, options=SUMMARY_ON)
    assert READ_CAP_MARK in str(stored.messages) and left_out_by_cap(read, answers_read_current=True)


def test_events_after_the_boundary_left_unread_are_noted_whatever_the_request_answers() -> None:
    events, summary = _session()
    read = _capped(events, summary, ReadStats(truncated=True, current_unread=True))
    for current in ("a new question 新问题", None):
        request = assemble_from_read("sys", read, current, options=SUMMARY_ON)
        assert READ_CAP_MARK in str(request.messages)
    assert left_out_by_cap(read, answers_read_current=False)
