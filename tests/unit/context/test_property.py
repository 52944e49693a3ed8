"""Property: every assembled request is valid for chat-completions and meets its budget.

Generated sessions mix parallel tool calls, pending calls, late results,
streamed partials, error events, several branches, reused ids, equal
timestamps, summaries at random boundaries, compaction on and off, and tight
budgets. ``DISTILL_PROPERTY_EXAMPLES`` cases (500 unless set; the acceptance run,
``make test``, is 10000) are generated from seeds (:mod:`tests.support.picks`; a
failure names its seed), and up to 300 more by Hypothesis, which shrinks a
failure to a small example.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas import ErrorInfo, Message, SessionEvent, SessionSummary
from streams.context import AssemblyOptions, CompactionConfig, RecallCapabilities, assemble, find_violations
from streams.context.history import event_message
from streams.context.pairing import REPLACED_MARK
from streams.rules.tokens import SimpleTokenCounter
from tests.support.picks import HypothesisPicks, Picks, SeededPicks
from tests.unit.context.sessions import T0, summary_at

EXAMPLES = int(os.environ.get("DISTILL_PROPERTY_EXAMPLES", "500"))
COUNTER = SimpleTokenCounter()
KEYS = ["", "app", "app/a", "app/b", "app/a/x"]
TOOLS = ["search", "shell", "fetch", "session_load", "write"]
BIG = "B" * 4096
TEXTS = ["ok", "", "some words here", BIG, "line\n" * 50, "é" * 300]
ARGS = ["{}", '{"q": "x"}', json.dumps({"body": BIG})]
HYPOTHESIS_EXAMPLES = min(EXAMPLES, 300)
SEED_CHUNKS = 20


class _Gen:
    def __init__(self, pick: Picks) -> None:
        self.pick = pick
        self.events: list[SessionEvent] = []
        self.n = 0
        self.call_seq = 0

    def add(self, role: str, request: str, invocation: str, **fields: Any) -> None:
        pick = self.pick
        self.n += 1
        same = self.events and pick.integer(0, 4) == 0
        ts = self.events[-1].timestamp if same else T0 + timedelta(seconds=self.n)
        flags: dict[str, Any] = {"filter_key": pick.choice(KEYS)}
        if pick.integer(0, 9) == 0:
            flags["skip_summarization"] = True
        if pick.integer(0, 12) == 0:
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
        if self.call_seq > 1 and self.pick.integer(0, 15) == 0:
            return f"c{self.pick.integer(1, self.call_seq - 1)}"  # a reused id
        return f"c{self.call_seq}"


def sessions(pick: Picks) -> list[SessionEvent]:
    g = _Gen(pick)
    late: list[tuple[str, str, str, str]] = []
    for r in range(pick.integer(0, 5)):
        request = pick.choice([f"r{r}", ""])
        invocation = pick.choice([f"i{r}", f"i{r}", ""])
        g.add("user", request, invocation, content=pick.choice(["hello", "", "do it"]))
        for _ in range(pick.integer(0, 4)):
            kind = pick.choice(["text", "tools", "tools", "partial", "system", "empty"])
            if kind == "text":
                g.add("assistant", request, invocation, content=pick.choice(TEXTS))
            elif kind == "partial":
                g.add("assistant", request, invocation, content="chu", partial=True)
            elif kind == "system":
                g.add("system", request, invocation, content="note")
            elif kind == "empty":
                g.add("assistant", request, invocation, content=None, reasoning_content="hmm")
            else:
                calls = [(g.call_id(), pick.choice(TOOLS)) for _ in range(pick.integer(1, 3))]
                args = pick.choice(ARGS)
                g.add(
                    "assistant",
                    request,
                    invocation,
                    content=pick.choice([None, "calling"]),
                    tool_calls=[
                        {"id": c, "type": "function", "function": {"name": n, "arguments": args}} for c, n in calls
                    ],
                )
                for call_id, name in pick.permutation(calls):
                    fate = pick.choice(["now", "now", "now", "late", "pending", "twice"])
                    content = pick.choice(TEXTS)
                    if fate in ("now", "twice"):
                        g.add("tool", request, invocation, tool_call_id=call_id, content=content, name=name)
                    if fate == "twice":
                        g.add("tool", request, invocation, tool_call_id=call_id, content=content)
                    if fate == "late":
                        late.append((call_id, name, request, invocation))
        while late and bool(pick.boolean()):
            call_id, name, request_l, inv_l = late.pop(0)
            g.add("tool", request_l, inv_l, tool_call_id=call_id, content=pick.choice(TEXTS), name=name)
    if pick.integer(0, 10) == 0:
        g.add("tool", "rx", "ix", tool_call_id="orphan", content="lost")
    return g.events


def summaries(pick: Picks, events: list[SessionEvent]) -> SessionSummary | None:
    if not events or pick.integer(0, 4) == 0:
        return None
    at = events[pick.integer(0, len(events) - 1)]
    mode = pick.choice(["id", "ts", "unknown-id"])
    summary = summary_at(at, pick.choice(["what happened so far", ""]), with_id=mode == "id")
    if mode == "unknown-id":
        boundary = summary.boundary.model_copy(update={"last_event_id": "nope"})
        summary = summary.model_copy(update={"boundary": boundary})
    return summary


def options(pick: Picks) -> AssemblyOptions:
    compaction = CompactionConfig(
        enabled=pick.boolean(),
        keep_recent_requests=pick.integer(0, 2),
        tool_result_max_tokens=pick.choice([0, 10, 256, 1024]),
        oversized_tool_result_max_tokens=pick.choice([0, 0, 50, 300]),
        force_clean_tool_names=frozenset(pick.subset(TOOLS, 2)),
        keep_tool_names=frozenset(pick.subset(TOOLS, 2)),
        skip_recent=pick.integer(0, 3),
    )
    return AssemblyOptions(
        add_session_summary=pick.boolean(),
        injection_mode=pick.choice(["system", "user"]),
        max_history_runs=pick.integer(0, 3),
        filter_key=pick.choice(KEYS),
        compaction=compaction,
        token_budget=pick.choice([None, None, 30, 120, 400, 1500, 5000]),
        token_counter=COUNTER,
        recall=RecallCapabilities(search=pick.boolean(), load=pick.boolean()),
    )


def _budget_shape_ok(messages: list[dict[str, Any]]) -> bool:
    """Over budget is allowed only when nothing droppable is left: one question, one step."""
    body = [m for m in messages if m["role"] != "system"]
    steps = [m for m in body if m["role"] != "tool"]
    return len(steps) <= 2 and sum(m["role"] == "user" for m in steps) <= 1


def _without_replaced_note(content: str) -> str:
    """A result that replaced an earlier one of its call ends with a note naming it; the payload is unchanged."""
    head, sep, _ = content.rpartition(REPLACED_MARK)
    return head.removesuffix("\n\n") if sep else content


@dataclass(frozen=True)
class Case:
    """A generated session, maybe a summary, options and a current message."""

    events: list[SessionEvent]
    summary: SessionSummary | None
    opts: AssemblyOptions
    current_choice: str
    current: Any


def make_case(pick: Picks) -> Case:
    events = sessions(pick)
    summary = summaries(pick, events)
    opts = options(pick)
    users = [e for e in events if e.message.role == "user"]
    current_choice = pick.choice(["str", "none", "event"] if users else ["str", "none"])
    current: Any = {"str": "the new question", "none": None}.get(current_choice)
    if current_choice == "event":
        current = pick.choice(users)
    return Case(events, summary, opts, current_choice, current)


def check_case(pick: Picks) -> None:
    """One generated case; the request assembled for it is checked (:func:`check`)."""
    check(make_case(pick))


def check(case: Case) -> None:
    events, summary, opts, current_choice, current = (
        case.events, case.summary, case.opts, case.current_choice, case.current)  # fmt: skip
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
        sent = {(m["tool_call_id"], _without_replaced_note(m["content"])) for m in req.messages if m["role"] == "tool"}
        assert sent <= originals  # compaction off: tool results reach the model unchanged (a note may follow)
    if current_choice == "str":
        last = req.messages[-1]
        assert last["role"] == "user" and str(last["content"]).endswith("the new question")


@settings(
    max_examples=HYPOTHESIS_EXAMPLES,
    deadline=None,
    derandomize=os.environ.get("DISTILL_PROPERTY_RANDOM") is None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(case=st.composite(lambda draw: make_case(HypothesisPicks(draw)))())
def test_assembled_requests_are_always_valid(case: Case) -> None:
    # Drawn inside one composite: ``st.data()`` draws cost several times more each (a report line per draw).
    check(case)


@pytest.mark.parametrize("chunk", range(SEED_CHUNKS))
def test_assembled_requests_are_always_valid_over_seeds(chunk: int) -> None:
    """``EXAMPLES`` seeded cases in all (the acceptance size), in chunks so a report says where."""
    offset = 0 if os.environ.get("DISTILL_PROPERTY_RANDOM") is None else random.randrange(1 << 30)
    for seed in range(chunk, EXAMPLES, SEED_CHUNKS):
        try:
            check_case(SeededPicks(offset + seed))
        except AssertionError as exc:
            raise AssertionError(f"case from seed {offset + seed} (SeededPicks({offset + seed})): {exc}") from exc
