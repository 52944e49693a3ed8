"""Oracle: an error event without content is in the summary input once a boundary passes it.

A prompt shows an error event that has no text as ``type: <t>, message: <m>``
(the Go rule), so while it lies after the boundary the model sees the error. Once a
summary covers it, the summary is the only place it can reach a request: the
summary input must hold what the prompt showed. Every event carries a CJK marker
(in its error message for the error events); a scripted model echoes the markers
its request held; every marker must be in the assembled request, before and after
the summary.
"""

from __future__ import annotations

import re

from streams.context import AssemblyOptions, assemble
from streams.summarizer.model import ModelResponse
from streams.summarizer.plan import RequestBuilder, plan_pass
from streams.summarizer.request import ChatRequest
from streams.summarizer.summarizer import Summarizer
from tests.unit.context.oracle import marker, unaccounted
from tests.unit.context.sessions import Session, summary_at

from .helpers import SESSION

MARKER = re.compile(r"标记\d{4}号")


class MarkerEcho:
    """Answers with every marker its request held (the summary carries exactly what reached the model)."""

    name = "scripted"
    context_window: int | None = 200_000
    provider_budget: int | None = None

    def __init__(self) -> None:
        self.requests: list[ChatRequest] = []

    async def complete(self, request: ChatRequest) -> ModelResponse:
        self.requests.append(request.clone())
        sent = "\n".join(str(m.get("content") or "") for m in request.messages)
        return ModelResponse(text="摘要：" + "，".join(dict.fromkeys(MARKER.findall(sent))) + "。", model=self.name)


def failing_session() -> Session:
    """A turn whose tool fails (an error result without content), and a model call that fails."""
    s = Session()
    s.user(f"查一下上海明天的天气 {marker(1)}")
    s.call(("c1", "weather", '{"city": "上海"}'))
    s.add("tool", tool_call_id="c1", name="weather", content=None,
          error={"type": "Timeout", "message": f"天气服务超时 {marker(3)}", "code": "504"})  # fmt: skip
    s.add("assistant", content=None, error={"type": "RateLimit", "message": f"模型配额用尽 {marker(4)}"})
    s.user(f"那就明天再试 {marker(5)}")
    s.answer(f"好的，明天再查 {marker(6)}")
    return s


async def test_an_error_event_covered_by_a_summary_is_in_its_input() -> None:
    s = failing_session()
    options = AssemblyOptions(add_session_summary=True)

    before = assemble("你是助手。", None, s.events, f"新问题 {marker(9)}", options=options)
    assert not unaccounted(before.messages, s.events), "the prompt does not show every event before a summary"

    model = MarkerEcho()
    result = await Summarizer(model).summarize("", s.events, session=SESSION)
    assert result.last_event is not None and result.last_event.event_id == s.events[-1].event_id

    summary = summary_at(result.last_event, result.text)
    after = assemble("你是助手。", summary, s.events, f"新问题 {marker(9)}", options=options)
    lost = unaccounted(after.messages, s.events)
    assert not lost, f"events {lost} are neither in the summary input nor visible in the request"
    sent = "\n".join(str(m.get("content") or "") for r in model.requests for m in r.messages)
    assert "type: Timeout, message: 天气服务超时" in sent, "the summary input reads the error as the prompt shows it"


def test_a_long_error_message_is_cut_head_and_tail_and_named_for_session_load() -> None:
    """An error text is a payload like any other: when the request must shrink it is cut, never dropped."""
    s = Session()
    s.user(f"跑一下构建 {marker(1)}")
    s.call(("c1", "build", "{}"))
    long_message = f"{marker(3)}" + "编译失败：找不到符号。" * 3000 + f"{marker(30)}"
    s.add("tool", tool_call_id="c1", name="build", content=None, error={"type": "BuildError", "message": long_message})
    s.answer(f"构建失败了 {marker(4)}")
    summarizer = Summarizer(MarkerEcho())
    builder = RequestBuilder(summarizer.prompts, summarizer.counter())
    budget = 1500
    assert builder.tokens(summarizer.formatter.conversation_text(s.events), "") > budget

    plan = plan_pass(s.events, "", budget, builder, summarizer.formatter)

    assert [e.event_id for e in plan.events] == [e.event_id for e in s.events]
    assert [(c.event_id, c.part) for c in plan.cuts] == [("e3", "tool_result")]
    text = plan.text
    assert 'session_load(event_id="e3")' in text
    assert marker(3) in text and marker(30) in text, "the head and tail of the error text are kept"


def test_a_fork_holds_an_error_event_only_as_the_prompt_shows_it() -> None:
    """The caller's request (what ``assemble`` built) holds the error text; a fork of it covers the event."""
    from streams.summarizer.conversation import DEFAULT_FORMATTER
    from streams.summarizer.fork import fork_misses

    s = failing_session()
    shown = assemble("你是助手。", None, s.events, options=AssemblyOptions()).messages
    assert fork_misses(shown, s.events, "", DEFAULT_FORMATTER) is None

    without_errors = [m for m in shown if "type: " not in str(m.get("content") or "")]
    missing = fork_misses(without_errors, s.events, "", DEFAULT_FORMATTER)
    assert missing is not None and "e3" in missing and "e4" in missing
