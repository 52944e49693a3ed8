"""``skip_summarization``: one meaning across the summarizer, the prompt and recall (DESIGN §2).

Stored and recallable; never in a summary's input; visible in the prompt while
it lies after the boundary; hidden once a boundary passes it. Checked with an
oracle: every event carries a marker, the scripted model echoes the markers it
received, and each marker is accounted for in the summary, the prompt or
recall — and a skip marker never in any summary request.
"""

from __future__ import annotations

import json
import re
from typing import Any

from schemas import FunctionCall, SessionEvent, SessionSummary, ToolCall
from streams.context import AssemblyOptions, RecallCapabilities, assemble
from streams.context.recall_tools import RecallExecutor
from streams.rules.tokens import SimpleTokenCounter
from streams.summarizer import Summarizer
from streams.summarizer.model import ModelResponse
from streams.summarizer.request import ChatRequest
from tests.unit.context.memory_reader import InMemoryReadAPI
from tests.unit.context.sessions import Session, summary_at

MARK = re.compile(r"(?:MARK|SKIP)-[0-9]+")
OPTS = AssemblyOptions(add_session_summary=True, recall=RecallCapabilities(search=True, load=True))


class EchoModel:
    """Answers every summary request with the markers it contains (what a faithful summary keeps)."""

    name = "echo"
    context_window = 100_000
    provider_budget = None

    def __init__(self) -> None:
        self.requests: list[ChatRequest] = []

    async def complete(self, request: ChatRequest) -> ModelResponse:
        self.requests.append(request.clone())
        seen = MARK.findall(json.dumps(request.messages, ensure_ascii=False))
        return ModelResponse(text="summary: " + " ".join(dict.fromkeys(seen)), model=self.name)

    def sent(self) -> str:
        return "\n".join(json.dumps(r.messages, ensure_ascii=False) for r in self.requests)


def _session() -> Session:
    s = Session()
    s.turn("r1").user("第一个问题 MARK-1")
    s.answer("debug trace SKIP-2", skip_summarization=True)
    s.call(("c1", "lookup"))
    s.result("c1", "lookup output MARK-4", name="lookup")
    s.answer("回答 MARK-5")
    s.answer("trailing debug SKIP-6", skip_summarization=True)
    return s


def _prompt(summary: SessionSummary | None, events: list[SessionEvent], current: str) -> str:
    request = assemble("sys", summary, events, current, options=OPTS)
    return "\n".join(str(m.get("content")) for m in request.messages)


def _summary(s: Session, result: Any, version: int = 1) -> SessionSummary:
    boundary = result.boundary()
    return summary_at(next(e for e in s.events if e.event_id == boundary.last_event_id), result.text).model_copy(
        update={"version": version}
    )


async def test_skip_events_follow_one_rule_through_summary_prompt_and_recall() -> None:
    s = _session()
    model = EchoModel()
    summarizer = Summarizer(model, token_counter=SimpleTokenCounter())  # type: ignore[arg-type]
    before = _prompt(None, s.events, "next MARK-7")
    assert "SKIP-2" in before and "SKIP-6" in before  # no boundary yet: visible

    first = await summarizer.summarize("", s.events)
    assert not re.search("SKIP", model.sent())  # never in a summary's input
    summary = _summary(s, first)
    assert summary.boundary.last_event_id == "e5"  # the last summarizable event
    prompt = _prompt(summary, s.events, "next MARK-7")
    assert "SKIP-2" not in prompt  # the boundary passed it: hidden
    assert "SKIP-6" in prompt  # after the boundary: still visible
    for marker in ("MARK-1", "MARK-4", "MARK-5"):
        assert marker in summary.summary and marker in prompt  # (in the summary block, not the history)
    api = InMemoryReadAPI(s.events, [summary])
    executor = RecallExecutor(api, app_name="app", user_id="u1", session_id="s1")
    call = ToolCall(id="t", function=FunctionCall(name="session_search", arguments='{"query": "debug trace SKIP-2"}'))
    found = json.loads((await executor.execute(call)).content or "")
    assert "e2" in {r["event_id"] for r in found["results"]}  # stored and recallable

    s.turn("r2").user("second MARK-7")
    s.answer("answer MARK-8")
    second = await summarizer.summarize(summary.summary, [e for e in s.events if e.timestamp > s.events[4].timestamp])
    assert not re.search("SKIP", model.sent())
    summary2 = _summary(s, second, version=2)
    prompt2 = _prompt(summary2, s.events, "third MARK-9")
    assert "SKIP-6" not in prompt2  # now passed by the new boundary
    assert all(f"MARK-{i}" in summary2.summary for i in (1, 4, 5, 7, 8))


async def test_a_fork_never_carries_a_visible_skip_event_into_the_summary_input() -> None:
    # The agent's own request shows SKIP-6 (after the boundary); forking it would put it in the input.
    s = _session()
    model = EchoModel()
    summarizer = Summarizer(model, token_counter=SimpleTokenCounter(), cache_safe_forking=True)  # type: ignore[arg-type]
    request = assemble("sys", None, s.events, None, options=AssemblyOptions(add_session_summary=True))
    assert "SKIP-6" in json.dumps(request.messages)
    result = await summarizer.summarize("", s.events, model_request={"messages": request.messages})
    assert not re.search("SKIP", model.sent())
    assert not result.fork_used
    assert all(m in result.text for m in ("MARK-1", "MARK-4", "MARK-5"))


async def test_a_fork_is_still_used_when_the_delta_has_no_skip_event() -> None:
    s = Session()
    s.turn("r1").user("q MARK-1")
    s.answer("a MARK-2")
    model = EchoModel()
    summarizer = Summarizer(model, token_counter=SimpleTokenCounter(), cache_safe_forking=True)  # type: ignore[arg-type]
    request = assemble("sys", None, s.events, None, options=AssemblyOptions(add_session_summary=True))
    result = await summarizer.summarize("", s.events, model_request={"messages": request.messages})
    assert result.fork_used
