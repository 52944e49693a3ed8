"""A late event — logged after a summary's boundary event, stamped before its cutoff — is in the request.

The summarizer goes by the log (``streams.rules.boundaries.delta_in_log_order``): such an event is not
in the summary, it is in the next pass. So the request shows it, in log order, whatever its stamp. The
oracle: a marker in every event; every event after the boundary event is accounted for in the request,
and no covered event's marker is (the summary holds it). Events are lists in log order, as the session's
events topic holds them and as ``ContextReader.read`` returns them.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from projections.context_read import applicable_summary
from schemas import SessionEvent, SessionSummary
from schemas.reads import ContextRead
from streams.context import AssemblyOptions, assemble, assemble_from_read
from streams.context.history import covered_mask
from tests.unit.context.oracle import marker, unaccounted
from tests.unit.context.sessions import Session, summary_at

OPTS = AssemblyOptions(add_session_summary=True)


def _late(s: Session, text: str, before: SessionEvent, **kw: object) -> SessionEvent:
    """An event appended to the log (logged last) but stamped a second before ``before``."""
    event = s.add("assistant", content=text, **kw)  # type: ignore[arg-type]
    late = event.model_copy(update={"timestamp": before.timestamp - timedelta(seconds=1)})
    s.events[-1] = late
    return late


def _contents(messages: list[dict[str, object]]) -> list[str]:
    return [str(m.get("content")) for m in messages if m.get("role") != "system"]


def _session() -> tuple[Session, SessionSummary, SessionEvent]:
    s = Session()
    s.turn("r1").user(f"东京的天气怎么样？ {marker(1)}")
    s.answer(f"东京今天晴 {marker(2)}")
    s.turn("r2").user(f"明天呢？ {marker(3)}")
    boundary = s.answer(f"明天有雨 {marker(4)}")
    summary = summary_at(boundary, f"摘要：{marker(1)} {marker(2)} {marker(3)} {marker(4)}")
    s.turn("r3").user(f"大阪呢？ {marker(5)}")
    late = _late(s, f"子代理迟到的笔记：大阪的酒店已订好 {marker(6)}", s.events[1])
    s.answer(f"大阪多云 {marker(7)}")
    return s, summary, late


def test_a_late_event_after_the_boundary_event_is_in_the_request_in_log_order() -> None:
    s, summary, late = _session()
    assert late.timestamp < summary.boundary.cutoff_at  # stamped before the cutoff (and before e2)
    got = assemble("sys", summary, s.events, None, (), OPTS)
    after = s.events[4:]
    assert unaccounted(got.messages, after) == [], "every event after the boundary event is in the request"
    body = _contents(got.messages)
    # Where it was logged: after the question of r3, before the answer — not at its stamp's place.
    assert [marker(5) in body[0], marker(6) in body[1], marker(7) in body[2]] == [True, True, True]
    covered = {marker(n) for n in (1, 2, 3, 4)}
    assert not any(m in text for m in covered for text in body), "the summary holds the covered events"


def test_the_read_sides_list_builds_the_same_request() -> None:
    s, summary, _ = _session()
    applied = applicable_summary([summary], "")
    assert applied is not None
    # What ContextReader.read returns: the boundary event and what follows it, in log order.
    read = ContextRead(app_name="app", user_id="u1", session_id="s1", filter_key="", summary=applied,
                       events=tuple(s.events[3:]), current_event_id="e5")  # fmt: skip
    got = assemble_from_read("sys", read, options=OPTS)
    assert got.messages == assemble("sys", summary, s.events, None, (), OPTS).messages
    assert marker(6) in str(got.messages)


def test_a_boundary_event_on_another_branch_still_marks_where_the_summary_ends() -> None:
    """An ancestor's summary applies to a branch; its boundary event is a sibling branch's event."""
    s = Session()
    s.turn("r1").user(f"订机票和酒店 {marker(1)}", filter_key="app")
    s.answer(f"机票已订 {marker(2)}", filter_key="app/flights")
    boundary = s.answer(f"酒店在找 {marker(3)}", filter_key="app/hotels")
    summary = summary_at(boundary, f"摘要 {marker(1)} {marker(2)} {marker(3)}")
    summary = summary.model_copy(update={"filter_key": "app"})
    late = _late(s, f"航班改签的结果（迟到） {marker(4)}", s.events[0], filter_key="app/flights")
    s.answer(f"好的 {marker(5)}", filter_key="app/flights")
    opts = AssemblyOptions(add_session_summary=True, filter_key="app/flights")
    got = assemble("sys", summary, s.events, None, (), opts)
    # Before: the branch does not see the boundary event, the cut fell back to the cutoff, and the late
    # event — not in the summary, logged after its boundary event — was in neither.
    assert unaccounted(got.messages, [late, s.events[-1]]) == []
    assert marker(2) not in str(got.messages[1:])
    # The read returns the boundary event although the branch does not show it (and the current question,
    # covered): the same request.
    applied = applicable_summary([summary], "app/flights")
    assert applied is not None and applied.source == "ancestor"
    read = ContextRead(app_name="app", user_id="u1", session_id="s1", filter_key="app/flights", summary=applied,
                       events=(s.events[0], boundary, late, s.events[-1]), current_event_id="e1")  # fmt: skip
    assert assemble_from_read("sys", read, options=opts).messages == got.messages


def test_a_timestamp_only_boundary_cuts_by_time_as_before() -> None:
    """An older build's boundary (no event id): the late event stays hidden until a summary with a boundary
    event holds it (the README says so)."""
    s, summary, late = _session()
    by_time = summary_at(None, summary.summary, cutoff=summary.boundary.cutoff_at)
    got = assemble("sys", by_time, s.events, None, (), OPTS)
    assert marker(6) not in str(got.messages)
    assert unaccounted(got.messages, [e for e in s.events[4:] if e is not late]) == []


@pytest.mark.parametrize("log_given", [True, False])
def test_covered_mask_takes_the_boundary_events_place_from_the_log(log_given: bool) -> None:
    s = Session()
    s.user("a")
    boundary = s.answer("b", filter_key="app/other")
    s.user("c")
    late = _late(s, "d", s.events[0])
    shown = [e for e in s.events if e.filter_key == ""]
    mask = covered_mask(shown, summary_at(boundary).boundary, s.events if log_given else None)
    # Without the log, the boundary event is not in the list: the cutoff decides and the late event is covered.
    assert mask == ([True, False, False] if log_given else [True, False, True])
    assert shown[-1] is late
