"""End-to-end assembly: the guide's request structures."""

from __future__ import annotations

import pytest

from projections.summary_selection import SummaryCut, select_for_prompt
from schemas import Message
from streams.context import AssemblyOptions, CompactionConfig, RecallCapabilities, assemble, find_violations
from streams.context.compaction import ARGUMENTS_PLACEHOLDER, PLACEHOLDER_MARK
from tests.unit.context.sessions import Session, summary_at

BIG = "R" * 8000


def _intra_run() -> Session:
    s = Session()
    s.turn("r0", "inv0").user("earlier request")
    s.answer("earlier answer")
    s.turn("r1", "inv1").user("migrate the database")  # e3
    s.call(("c1", "dump", "{}"))  # e4
    s.result("c1", "dumped", name="dump")  # e5
    s.call(("c2", "copy", '{"table": "' + "t" * 6000 + '"}'), ("c3", "check", "{}"))  # e6
    s.result("c2", BIG, name="copy")  # e7
    s.result("c3", "all good", name="check")  # e8  <- intra-run summary boundary
    s.answer("copied; verifying")  # e9
    s.call(("c4", "verify", "{}"))  # e10
    s.result("c4", "verified", name="verify")  # e11
    return s


def test_intra_run_request_structure_follows_the_guide() -> None:
    s = _intra_run()
    opts = AssemblyOptions(add_session_summary=True, compaction=CompactionConfig(enabled=True))
    req = assemble("sys", summary_at(s.events[7], "did dump, copy, check"), s.events, None, options=opts)
    roles = [m["role"] for m in req.messages]
    assert roles == ["system", "user", "assistant", "tool", "tool", "assistant", "assistant", "tool"]
    assert "did dump, copy, check" in req.messages[0]["content"]
    assert req.messages[1]["content"] == "migrate the database"
    resumed_call = req.messages[2]
    assert [c["id"] for c in resumed_call["tool_calls"]] == ["c2", "c3"]
    assert resumed_call["tool_calls"][0]["function"]["arguments"] == ARGUMENTS_PLACEHOLDER
    assert resumed_call["tool_calls"][1]["function"]["arguments"] == "{}"
    assert req.messages[3]["content"].startswith(PLACEHOLDER_MARK)
    assert "reason: current_invocation_summary" in req.messages[3]["content"]
    assert req.messages[4]["content"] == "all good"
    assert [m["content"] for m in req.messages[5:]] == ["copied; verifying", None, "verified"]
    assert req.report.resume_events == 3
    assert find_violations(req.messages) == []


def test_intra_run_without_compaction_keeps_payloads() -> None:
    s = _intra_run()
    req = assemble("sys", summary_at(s.events[7]), s.events, None, options=AssemblyOptions(add_session_summary=True))
    assert req.messages[3]["content"] == BIG


def test_cutoff_between_call_and_result_restores_only_the_pair() -> None:
    s = Session()
    s.turn("r1", "inv1").user("old")
    s.answer("old answer")
    s.turn("r2", "inv2").user("new task")
    cut = s.call(("c1", "lookup"))
    s.result("c1", "value")
    s.answer("done")
    req = assemble("sys", summary_at(cut), s.events, "thanks", options=AssemblyOptions(add_session_summary=True))
    assert [m["role"] for m in req.messages] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert req.messages[1]["content"] == "new task"
    assert find_violations(req.messages) == []


def test_pending_call_is_not_sent() -> None:
    s = Session()
    s.user("please confirm")
    s.call(("c1", "confirm"))  # waiting for a human
    req = assemble("sys", None, s.events, None)
    assert [m["role"] for m in req.messages] == ["system", "user"]
    assert req.report.pairing.unanswered_calls == 1


def test_branch_filter_hides_sibling_branches() -> None:
    s = Session()
    s.user("root question", filter_key="app")
    s.answer("from a", filter_key="app/a")
    s.answer("from b", filter_key="app/b")
    req = assemble("sys", None, s.events, None, options=AssemblyOptions(filter_key="app/a"))
    assert [m["content"] for m in req.messages[1:]] == ["root question", "from a"]


def test_new_message_event_is_appended_and_kept() -> None:
    s = Session()
    s.user("q1")
    s.answer("a1")
    new = Session()
    new.events = list(s.events)
    current = new.turn("r2").user("q2")
    req = assemble("sys", None, s.events, current)
    assert req.messages[-1] == {"role": "user", "content": "q2"}


def test_prefix_messages_stay_and_system_parts_merge() -> None:
    s = Session()
    s.user("q")
    opts = AssemblyOptions(
        prefix_messages=(
            Message(role="system", content="extra rules"),
            Message(role="user", content="example q"),
            Message(role="assistant", content="example a"),
        ),
        token_budget=1,
    )
    req = assemble("sys", None, s.events, None, options=opts)
    assert req.messages[0] == {"role": "system", "content": "sys\n\nextra rules"}
    assert [m["content"] for m in req.messages[1:]] == ["example q", "example a", "q"]
    assert req.report.over_budget


def test_recall_hint_in_placeholder_only_when_session_load_offered() -> None:
    s = Session()
    for n in range(3):
        s.turn(f"r{n}").user(f"q{n}")
        s.call((f"c{n}", "fetch"))
        s.result(f"c{n}", BIG)
        s.answer(f"a{n}")
    on = CompactionConfig(enabled=True)
    with_load = assemble(
        "sys", None, s.events, "next", options=AssemblyOptions(compaction=on, recall=RecallCapabilities(load=True))
    )
    without = assemble("sys", None, s.events, "next", options=AssemblyOptions(compaction=on))
    assert "call session_load" in with_load.messages[3]["content"]
    assert "cannot be fetched" in without.messages[3]["content"]
    assert with_load.report.compaction.placeholders == 2  # r2 is the protected recent request


def test_nothing_to_send_is_an_error() -> None:
    with pytest.raises(ValueError, match="nothing to send"):
        assemble("", None, [], None)


def test_a_branch_prompt_never_cuts_at_its_descendants_or_a_sibling_summary() -> None:
    # app/trip has no summary of its own; its children and a sibling have. None of them saw the app/trip
    # events (e1, e4), so none may stand for app/trip in its prompt: nothing is injected, nothing cut.
    s = Session()
    s.user("book flights MARK-1", filter_key="app/trip")  # e1
    s.answer("outbound TP1234 MARK-2", filter_key="app/trip/out")  # e2
    back = s.answer("return TP4321 MARK-3", filter_key="app/trip/back")  # e3
    s.answer("trip note MARK-4", filter_key="app/trip")  # e4
    out2 = s.answer("outbound seat 12A MARK-5", filter_key="app/trip/out")  # e5
    s.answer("return meal chosen MARK-6", filter_key="app/trip/back")  # e6
    cuts = [
        SummaryCut("app/trip/out", "outbound booked", out2.timestamp, out2.event_id),
        SummaryCut("app/trip/back", "return booked", back.timestamp, back.event_id),
        SummaryCut("app/hotel", "hotel booked", out2.timestamp, out2.event_id),
    ]
    view = select_for_prompt(cuts, "app/trip")
    assert view is None
    opts = AssemblyOptions(add_session_summary=True, filter_key="app/trip")
    req = assemble("sys", view, s.events, "next", options=opts)
    joined = "\n".join(str(m["content"]) for m in req.messages)
    assert all(f"MARK-{i}" in joined for i in range(1, 7))
    assert not req.report.summary_injected and req.report.covered_events == 0
    # An ancestor's summary saw every app/trip event: it stands for the key and cuts at its boundary.
    cuts.append(SummaryCut("app", "app so far MARK-1 MARK-2 MARK-3", back.timestamp, back.event_id))
    view = select_for_prompt(cuts, "app/trip")
    assert view is not None and view.source == "ancestor"
    req = assemble("sys", view, s.events, "next", options=opts)
    assert "app so far" in req.messages[0]["content"] and req.report.covered_events == 3
