"""Property: every assembled request is valid for chat-completions and meets its budget.

Generated sessions mix parallel tool calls, pending calls, late results,
streamed partials, error events, several branches, reused ids, equal
timestamps, summaries at random boundaries, compaction on and off, and tight
budgets. The default run uses ``DISTILL_PROPERTY_EXAMPLES`` examples (500 unless
set); the acceptance run is ``DISTILL_PROPERTY_EXAMPLES=10000``.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas import ErrorInfo, Message, SessionEvent, SessionSummary
from streams.context import AssemblyOptions, CompactionConfig, RecallCapabilities, assemble, find_violations
from streams.context.history import event_message
from streams.rules.tokens import SimpleTokenCounter
from tests.unit.context.sessions import T0, summary_at

EXAMPLES = int(os.environ.get("DISTILL_PROPERTY_EXAMPLES", "500"))
COUNTER = SimpleTokenCounter()
KEYS = ["", "app", "app/a", "app/b", "app/a/x"]
TOOLS = ["search", "shell", "fetch", "session_load", "write"]
BIG = "B" * 4096
TEXTS = st.sampled_from(["ok", "", "some words here", BIG, "line\n" * 50, "é" * 300])


class _Gen:
    def __init__(self, draw: st.DrawFn) -> None:
        self.draw = draw
        self.events: list[SessionEvent] = []
        self.n = 0
        self.call_seq = 0

    def add(self, role: str, request: str, invocation: str, **fields: Any) -> None:
        draw = self.draw
        self.n += 1
        same = self.events and draw(st.integers(0, 4)) == 0
        ts = self.events[-1].timestamp if same else T0 + timedelta(seconds=self.n)
        flags: dict[str, Any] = {"filter_key": draw(st.sampled_from(KEYS))}
        if draw(st.integers(0, 9)) == 0:
            flags["skip_summarization"] = True
        if draw(st.integers(0, 12)) == 0:
            flags["error"] = ErrorInfo(type="boom", message="failed")
        self.events.append(
            SessionEvent(
                app_name="app",
                user_id="u",
                session_id="s",
                event_id=f"e{self.n}",
                timestamp=ts,
                request_id=request,
                invocation_id=invocation,
                author="user" if role == "user" else "agent",
                message={"role": role, **fields},
                **flags,
            )
        )

    def call_id(self) -> str:
        self.call_seq += 1
        if self.call_seq > 1 and self.draw(st.integers(0, 15)) == 0:
            return f"c{self.draw(st.integers(1, self.call_seq - 1))}"  # a reused id
        return f"c{self.call_seq}"


@st.composite
def sessions(draw: st.DrawFn) -> list[SessionEvent]:
    g = _Gen(draw)
    late: list[tuple[str, str, str, str]] = []
    for r in range(draw(st.integers(0, 5))):
        request = draw(st.sampled_from([f"r{r}", ""]))
        invocation = draw(st.sampled_from([f"i{r}", f"i{r}", ""]))
        g.add("user", request, invocation, content=draw(st.sampled_from(["hello", "", "do it"])))
        for _ in range(draw(st.integers(0, 4))):
            kind = draw(st.sampled_from(["text", "tools", "tools", "partial", "system", "empty"]))
            if kind == "text":
                g.add("assistant", request, invocation, content=draw(TEXTS))
            elif kind == "partial":
                g.add("assistant", request, invocation, content="chu", partial=True)
            elif kind == "system":
                g.add("system", request, invocation, content="note")
            elif kind == "empty":
                g.add("assistant", request, invocation, content=None, reasoning_content="hmm")
            else:
                calls = [(g.call_id(), draw(st.sampled_from(TOOLS))) for _ in range(draw(st.integers(1, 3)))]
                args = draw(st.sampled_from(["{}", '{"q": "x"}', json.dumps({"body": BIG})]))
                g.add(
                    "assistant",
                    request,
                    invocation,
                    content=draw(st.sampled_from([None, "calling"])),
                    tool_calls=[
                        {"id": c, "type": "function", "function": {"name": n, "arguments": args}} for c, n in calls
                    ],
                )
                for call_id, name in draw(st.permutations(calls)):
                    fate = draw(st.sampled_from(["now", "now", "now", "late", "pending", "twice"]))
                    content = draw(TEXTS)
                    if fate in ("now", "twice"):
                        g.add("tool", request, invocation, tool_call_id=call_id, content=content, name=name)
                    if fate == "twice":
                        g.add("tool", request, invocation, tool_call_id=call_id, content=content)
                    if fate == "late":
                        late.append((call_id, name, request, invocation))
        while late and bool(draw(st.booleans())):
            call_id, name, request_l, inv_l = late.pop(0)
            g.add("tool", request_l, inv_l, tool_call_id=call_id, content=draw(TEXTS), name=name)
    if draw(st.integers(0, 10)) == 0:
        g.add("tool", "rx", "ix", tool_call_id="orphan", content="lost")
    return g.events


@st.composite
def summaries(draw: st.DrawFn, events: list[SessionEvent]) -> SessionSummary | None:
    if not events or draw(st.integers(0, 4)) == 0:
        return None
    at = events[draw(st.integers(0, len(events) - 1))]
    mode = draw(st.sampled_from(["id", "ts", "unknown-id"]))
    summary = summary_at(at, draw(st.sampled_from(["what happened so far", ""])), with_id=mode == "id")
    if mode == "unknown-id":
        boundary = summary.boundary.model_copy(update={"last_event_id": "nope"})
        summary = summary.model_copy(update={"boundary": boundary})
    return summary


@st.composite
def options(draw: st.DrawFn) -> AssemblyOptions:
    compaction = CompactionConfig(
        enabled=draw(st.booleans()),
        keep_recent_requests=draw(st.integers(0, 2)),
        tool_result_max_tokens=draw(st.sampled_from([0, 10, 256, 1024])),
        oversized_tool_result_max_tokens=draw(st.sampled_from([0, 0, 50, 300])),
        force_clean_tool_names=frozenset(draw(st.sets(st.sampled_from(TOOLS), max_size=2))),
        keep_tool_names=frozenset(draw(st.sets(st.sampled_from(TOOLS), max_size=2))),
        skip_recent=draw(st.integers(0, 3)),
    )
    return AssemblyOptions(
        add_session_summary=draw(st.booleans()),
        injection_mode=draw(st.sampled_from(["system", "user"])),
        max_history_runs=draw(st.integers(0, 3)),
        filter_key=draw(st.sampled_from(KEYS)),
        compaction=compaction,
        token_budget=draw(st.sampled_from([None, None, 30, 120, 400, 1500, 5000])),
        token_counter=COUNTER,
        recall=RecallCapabilities(search=draw(st.booleans()), load=draw(st.booleans())),
    )


def _budget_shape_ok(messages: list[dict[str, Any]]) -> bool:
    """Over budget is allowed only when nothing droppable is left: one question, one step."""
    body = [m for m in messages if m["role"] != "system"]
    steps = [m for m in body if m["role"] != "tool"]
    return len(steps) <= 2 and sum(m["role"] == "user" for m in steps) <= 1


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=os.environ.get("DISTILL_PROPERTY_RANDOM") is None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_assembled_requests_are_always_valid(data: st.DataObject) -> None:
    events = data.draw(sessions())
    summary = data.draw(summaries(events))
    opts = data.draw(options())
    users = [e for e in events if e.message.role == "user"]
    current_choice = data.draw(st.sampled_from(["str", "none", "event"] if users else ["str", "none"]))
    current: Any = {"str": "the new question", "none": None}.get(current_choice)
    if current_choice == "event":
        current = data.draw(st.sampled_from(users))
    tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in TOOLS[:2]]

    req = assemble("You are an agent.", summary, events, current, tools, opts)

    assert find_violations(req.messages, require_system=True) == []
    names = [t["function"]["name"] for t in req.tools]
    assert len(names) == len(set(names))
    overhead = sum(COUNTER.count_text(json.dumps(t, separators=(",", ":"))) for t in req.tools)
    total = overhead + sum(COUNTER.count_message(Message.model_validate(m)) for m in req.messages)
    assert total == req.report.prompt_tokens
    if opts.token_budget is not None:
        assert total <= opts.token_budget or (req.report.over_budget and _budget_shape_ok(req.messages))
    if not opts.compaction.enabled:
        sendable = [m for e in events if (m := event_message(e)) is not None and m.role == "tool"]
        originals = {(m.tool_call_id, m.content) for m in sendable}
        sent = {(m["tool_call_id"], m["content"]) for m in req.messages if m["role"] == "tool"}
        assert sent <= originals  # compaction off: tool results reach the model unchanged
    if current_choice == "str":
        last = req.messages[-1]
        assert last["role"] == "user" and str(last["content"]).endswith("the new question")
