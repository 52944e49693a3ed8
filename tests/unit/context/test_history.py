"""History projection: cutoff at the boundary, restorations, resume tail, runs."""

from __future__ import annotations

from schemas import ErrorInfo
from streams.context.history import covered_mask, event_message, project_history, select_runs
from streams.context.items import HistoryItem
from streams.rules.filter_keys import related as matches_filter_key
from tests.unit.context.sessions import Session, summary_at


def ids(items: list[HistoryItem]) -> list[str | None]:
    return [item.event_id for item in items]


def test_event_id_boundary_is_exact() -> None:
    s = Session()
    s.user("one")
    s.answer("a1")
    cut = s.answer("a2", same_ts=True)
    s.answer("a3", same_ts=True)
    s.turn("r2").user("two")
    got = project_history(s.events, summary_at(cut).boundary, current_index=4)
    # e4 shares e3's timestamp but the id boundary is exact; e1 anchors the retained r1 answer
    assert ids(got.items) == ["e1", "e4", "e5"]
    assert [i.origin for i in got.items] == ["restored", "history", "current"]
    assert got.covered_events == 3


def test_timestamp_boundary_keeps_same_timestamp_events() -> None:
    s = Session()
    s.user("one")
    cut = s.answer("a1")
    s.answer("a2", same_ts=True)
    s.turn("r2").user("two")
    s.turn("r2").user("two")
    got = project_history(s.events, summary_at(cut, with_id=False).boundary, current_index=4)
    # e2 is re-included (same timestamp as the cutoff); e1 anchors the retained r1 turn
    assert ids(got.items) == ["e1", "e2", "e3", "e4", "e5"]


def test_unknown_event_id_falls_back_to_timestamp() -> None:
    s = Session()
    s.user("one")
    s.answer("a1")
    boundary = summary_at(s.events[0]).boundary.model_copy(update={"last_event_id": "gone"})
    assert covered_mask(s.events, boundary) == [False, False]


def test_current_user_message_is_kept_when_covered() -> None:
    s = Session()
    s.user("old")
    s.answer("old answer")
    s.turn("r2").user("current")
    s.call(("c1", "search"))
    s.result("c1", "found")
    cut = s.answer("partial thoughts")
    got = project_history(s.events, summary_at(cut).boundary, current_index=2)
    assert ids(got.items)[0] == "e3"
    assert got.items[0].origin == "current"


def test_covered_call_is_restored_for_retained_result_reduced_to_needed_calls() -> None:
    s = Session()
    s.user("go")
    s.call(("c1", "a"), ("c2", "b"))
    cut = s.result("c1", "r1")
    s.result("c2", "r2")
    s.turn("r2").user("next")
    got = project_history(s.events, summary_at(cut).boundary, current_index=4)
    anchor, restored = got.items[0], got.items[1]
    assert anchor.origin == restored.origin == "restored"
    assert [c.id for c in restored.message.tool_calls] == ["c2"]
    assert restored.message.content is None
    assert ids(got.items) == ["e1", "e2", "e4", "e5"]


def test_covered_user_anchor_restored_before_retained_assistant_turn() -> None:
    s = Session()
    s.turn("r1").user("question one")
    cut = s.call(("c1", "a"))
    s.result("c1", "r")
    s.answer("answer one")
    s.turn("r2").user("question two")
    got = project_history(s.events, summary_at(cut).boundary, current_index=4)
    # the retained r1 turn starts with a tool result: its call and question come back
    assert ids(got.items) == ["e1", "e2", "e3", "e4", "e5"]
    assert got.items[0].origin == "restored"


def _intra_run_session() -> Session:
    s = Session()
    s.turn("r0").user("earlier request")
    s.answer("earlier answer")
    s.turn("r1", "inv1").user("do the task")  # e3, current
    s.call(("c1", "list_files"))  # e4
    s.result("c1", "a.txt b.txt")  # e5
    s.call(("c2", "read", '{"path": "a.txt"}'), ("c3", "read", '{"path": "b.txt"}'))  # e6 parallel
    s.result("c2", "A" * 40)  # e7
    s.result("c3", "B" * 40)  # e8 <- intra-run boundary
    s.call(("c4", "write"))  # e9
    s.result("c4", "ok")  # e10
    return s


def test_resume_tail_restores_latest_complete_round_with_parallel_calls() -> None:
    s = _intra_run_session()
    got = project_history(s.events, summary_at(s.events[7]).boundary, current_index=2)
    assert ids(got.items) == ["e3", "e6", "e7", "e8", "e9", "e10"]
    assert [i.origin for i in got.items] == ["current", "resume", "resume", "resume", "history", "history"]
    assert {c.id for c in got.items[1].message.tool_calls} == {"c2", "c3"}
    assert got.resume_events == 3


def test_resume_tail_skips_incomplete_parallel_round() -> None:
    s = Session()
    s.turn("r1", "inv1").user("task")
    s.call(("c1", "x"))
    s.result("c1", "one")
    s.call(("c2", "y"), ("c3", "z"))
    cut = s.result("c2", "two")  # c3 still pending at the boundary
    s.result("c3", "three")
    got = project_history(s.events, summary_at(cut).boundary, current_index=0)
    # c1 round is the latest complete covered round; c2 comes back only as a restored call for c3's result
    resumed = [i for i in got.items if i.origin == "resume"]
    assert ids(resumed) == ["e2", "e3"]


def test_resume_tail_prefers_later_call_on_tie() -> None:
    s = Session()
    s.turn("r1", "inv1").user("task")
    s.call(("c1", "x"))
    s.call(("c2", "y"))
    s.result("c1", "one")
    cut = s.result("c2", "two")
    s.answer("done")
    got = project_history(s.events, summary_at(cut).boundary, current_index=0)
    resumed = [i for i in got.items if i.origin == "resume"]
    assert ids(resumed) == ["e3", "e5"]


def test_no_resume_tail_for_seed_history() -> None:
    s = Session()
    s.turn("r1", "inv1").user("old")
    s.call(("c1", "x"))
    cut = s.result("c1", "one")
    s.turn("r2", "inv2").user("new")
    got = project_history(s.events, summary_at(cut).boundary, current_index=3)
    assert ids(got.items) == ["e4"]


def test_event_message_rules() -> None:
    s = Session()
    partial = s.answer("chunk", partial=True)
    system = s.add("system", content="sys")
    failed = s.add("assistant", content=None, error=ErrorInfo(type="timeout", message="tool took too long"))
    empty = s.add("assistant", content="")
    no_id = s.add("tool", content="x")
    assert event_message(partial) is None
    assert event_message(system) is None
    failed_msg = event_message(failed)
    assert failed_msg is not None and failed_msg.content == "type: timeout, message: tool took too long"
    assert event_message(empty) is None
    assert event_message(no_id) is None


def test_select_runs_keeps_last_runs_including_current() -> None:
    s = Session()
    for n in range(4):
        s.turn(f"r{n}").user(f"q{n}")
        s.answer(f"a{n}")
    items = project_history(s.events, None).items
    assert ids(select_runs(items, 2)) == ["e5", "e6", "e7", "e8"]
    assert ids(select_runs(items, 0)) == ids(items)
    assert ids(select_runs(items, 10)) == ids(items)


def test_filter_key_sees_ancestors_and_descendants_only() -> None:
    assert matches_filter_key("app/a", "app/a")
    assert matches_filter_key("app", "app/a")
    assert matches_filter_key("app/a/b", "app/a")
    assert matches_filter_key("", "app/a")
    assert matches_filter_key("app/b", "")
    assert not matches_filter_key("app/ab", "app/a")
    assert not matches_filter_key("app/b", "app/a")
