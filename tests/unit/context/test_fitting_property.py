"""Property: whatever the budget, every event after the boundary is in the fitted request or named in it.

The oracle of ``test_fitting_oracle`` over generated sessions: CJK, Latin and
emoji payloads of up to ~20 K characters with a marker at the head, the middle or
the tail; tool calls answered once, twice (a pending result, then the final one)
or never (up to six in a round: more left out than the four ids a note used to
name); failed calls carried by ``error`` alone; ``skip_summarization``
events; branches; equal and out-of-order timestamps (late events); a summary
at a random boundary, injected in either mode, sometimes alone over the budget;
compaction on and off; summaries off with ``max_history_runs``; budgets from
far too small to ample. After ``fit``, each event the request must carry (after
the boundary, on the key's line of ancestry) has every marker in the request, or
a ``[distill: …]`` note in the request names its event (a cut, a placeholder,
dropped rounds, a left-out call: the request itself, not only the report's list);
and the summary is in the request whole. ``DISTILL_PROPERTY_EXAMPLES``
cases (200 unless set).
"""

from __future__ import annotations

import json
import os
import re
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections.context_read import applicable_summary
from projections.filter_keys import related
from schemas.reads import ContextRead, ReadStats
from streams.context.assembly import AssemblyOptions, assemble
from streams.context.compaction import CompactionConfig
from streams.context.fitting import fit
from streams.context.from_read import READ_CAP_MARK, assemble_from_read
from streams.context.history import covered_mask
from streams.context.recall_tools import RecallCapabilities
from streams.context.validity import assert_valid
from streams.rules.tokens import ScriptAwareTokenCounter, SimpleTokenCounter
from tests.unit.context.oracle import marker, unaccounted
from tests.unit.context.sessions import T0, Session, summary_at

EXAMPLES = min(int(os.environ.get("DISTILL_PROPERTY_EXAMPLES", "200")), 2000)
LOAD = RecallCapabilities(search=True, load=True)
UNITS = ("数据分析结果", "lorem ipsum dolor ", "表格 table 内容 ", "😀👍🏽 ")
KEYS = ("", "app", "app/a", "app/b", "app/a/x")


@st.composite
def sessions(draw: st.DrawFn) -> Session:
    s = Session()
    count = [0]

    def text() -> str:
        count[0] += 1
        mark, body = marker(count[0]), draw(st.sampled_from(UNITS)) * draw(st.sampled_from([0, 3, 40, 400, 3000]))
        half = len(body) // 2
        return draw(st.sampled_from([mark + body, body[:half] + mark + body[half:], body + mark]))

    def flags() -> dict[str, object]:
        out: dict[str, object] = {}
        key = draw(st.sampled_from(KEYS))
        if key:
            out["filter_key"] = key
        if draw(st.integers(0, 9)) == 0:
            out["skip_summarization"] = True
        if draw(st.integers(0, 4)) == 0:
            out["same_ts"] = True
        return out

    for r in range(draw(st.integers(1, 6))):
        s.turn(f"r{r}").user(text(), **flags())
        for c in range(draw(st.sampled_from([0, 1, 2, 6]))):  # 6: parallel calls, several left without a result
            call_id, kw = f"c{r}_{c}", flags()
            s.call((call_id, draw(st.sampled_from(["lookup", "write"])), json.dumps({"q": text()}, ensure_ascii=False)),
                   **kw)  # fmt: skip
            for _ in range(draw(st.integers(0, 2))):  # never answered, answered, answered twice
                s.result(call_id, text(), **kw)
        if draw(st.booleans()):
            if draw(st.integers(0, 5)) == 0:
                count[0] += 1
                s.add("assistant", error={"type": "Boom", "message": marker(count[0])}, **flags())
            else:
                s.answer(text(), **flags())
    for i, event in enumerate(s.events):  # some events stamped before events logged before them
        if draw(st.integers(0, 6)) == 0:
            late = T0 + timedelta(seconds=draw(st.integers(0, len(s.events))))
            s.events[i] = event.model_copy(update={"timestamp": late})
    return s


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(sessions(), st.data())
def test_every_event_after_the_boundary_is_in_the_fitted_request_or_named(s: Session, data: st.DataObject) -> None:
    draw = data.draw
    filter_key = draw(st.sampled_from(KEYS))
    on_line = [i for i, e in enumerate(s.events) if related(e.filter_key, filter_key)]
    at = draw(st.sampled_from([-1, *on_line]))
    text = f"前情提要 {marker(9999)}" + " 摘要" * draw(st.sampled_from([1, 50, 500]))
    summary = summary_at(s.events[at], text) if at >= 0 else None
    compaction = draw(st.sampled_from([False, True]))
    config = CompactionConfig(
        enabled=True, keep_recent_requests=draw(st.integers(0, 2)),
        tool_result_max_tokens=draw(st.sampled_from([0, 50, 1024])),
        oversized_tool_result_max_tokens=draw(st.sampled_from([0, 100, 8192])), skip_recent=draw(st.integers(0, 3)),
    ) if compaction else CompactionConfig()  # fmt: skip
    use_summary = draw(st.integers(0, 5)) > 0
    options = AssemblyOptions(
        add_session_summary=use_summary, max_history_runs=draw(st.integers(0, 3)), filter_key=filter_key,
        injection_mode=draw(st.sampled_from(["system", "user"])),
        token_budget=draw(st.sampled_from([None, 300, 800, 2000, 6000, 30000])),
        token_counter=draw(st.sampled_from([ScriptAwareTokenCounter(), SimpleTokenCounter()])), recall=LOAD,
        compaction=config,
    )  # fmt: skip
    current = draw(st.sampled_from([None, "下一步呢？ next?"]))
    fitted = fit(lambda o: assemble("你是助手。", summary, s.events, current, options=o), options)
    messages = fitted.request.messages
    assert_valid(messages)

    shown = [e for e in s.events if related(e.filter_key, filter_key)]
    if use_summary and summary is not None:
        shown = [e for e, covered in zip(shown, covered_mask(shown, summary.boundary, s.events), strict=True)
                 if not covered]  # fmt: skip
    owed = {e.event_id for e in shown}
    # A left-out call or result is named by the request itself, not only by the report's list.
    missing = [eid for eid in unaccounted(messages, s.events) if eid in owed]
    assert missing == [], (missing, fitted.request.report)
    if use_summary and summary is not None:
        assert summary.summary in "\n".join(str(m.get("content")) for m in messages)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(sessions(), st.data())
def test_a_read_stopped_at_its_event_cap_is_noted_in_the_fitted_request(s: Session, data: st.DataObject) -> None:
    """The read takes the newest ``max_events`` events after the boundary (of the whole history without the
    summary shown): the request holds or names every event it read, and a note names the event its history
    starts at — each event the read left out is logged before it, after the boundary."""
    draw = data.draw
    filter_key = draw(st.sampled_from(KEYS))
    on_line = [i for i, e in enumerate(s.events) if related(e.filter_key, filter_key)]
    at = draw(st.sampled_from([-1, *on_line]))
    summary = summary_at(s.events[at], f"前情提要 {marker(9999)}") if at >= 0 else None
    shows = summary is not None and draw(st.booleans())
    options = AssemblyOptions(
        add_session_summary=shows, filter_key=filter_key, recall=LOAD,
        token_budget=draw(st.sampled_from([None, 800, 6000])), token_counter=SimpleTokenCounter(),
    )  # fmt: skip
    covered = covered_mask(s.events, summary.boundary if shows and summary is not None else None)
    owed = [e for e, c in zip(s.events, covered, strict=True) if not c and related(e.filter_key, filter_key)]
    cap = draw(st.integers(1, max(1, len(owed))))
    dropped = {e.event_id for e in owed[: len(owed) - cap]}
    applied = applicable_summary([summary], filter_key) if summary is not None else None
    read = ContextRead(
        app_name="app", user_id="u1", session_id=s.session_id, filter_key=filter_key, summary=applied,
        events=tuple(e for e in s.events if e.event_id not in dropped), full_history=not shows,
        stats=ReadStats(truncated=bool(dropped)),
    )  # fmt: skip
    fitted = fit(lambda o: assemble_from_read("你是助手。", read, options=o), options)
    messages = fitted.request.messages
    assert_valid(messages)
    text = "\n".join(str(m.get("content")) for m in messages)
    notes = re.findall(r"before event_id=([\w-]+) \(where this history starts\)", text)
    if not dropped:
        assert READ_CAP_MARK not in text
    else:
        first = owed[len(owed) - cap].event_id
        assert notes == [first], "the request names where its history starts, after the events the read left out"
    missing = [eid for eid in unaccounted(messages, s.events) if eid in {e.event_id for e in owed} - dropped]
    assert missing == [], (missing, fitted.request.report)
