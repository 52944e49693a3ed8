"""Oracle: an error event without content is in the summary input once a boundary passes it.

A prompt shows an error event that has no text as ``type: <t>, message: <m>``
(the Go rule), so while it lies after the boundary the model sees the error. Once a
summary covers it, the summary is the only place it can reach a request: the
summary input must hold what the prompt showed. Every event carries a marker (in
its error message for the error events, glued to CJK text); the scripted
OpenAI-compatible server echoes the markers its request held; every marker must be
in the assembled request, before and after the summary.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pydantic import SecretStr

from schemas.settings import LLMSettings
from streams.context import AssemblyOptions, assemble
from streams.summarizer.conversation import DEFAULT_FORMATTER
from streams.summarizer.fork import fork_misses
from streams.summarizer.openai_adapter import OpenAIChatModel
from streams.summarizer.plan import RequestBuilder, plan_pass
from streams.summarizer.summarizer import Summarizer
from tests.support.markers import MarkerBook, find_markers
from tests.support.openai_server import MarkerEcho, OpenAIServer, request_text
from tests.unit.context.sessions import Session, summary_at

from .helpers import SESSION


@pytest.fixture(scope="module")
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer(default=MarkerEcho()) as srv:
        yield srv


def model_for(server: OpenAIServer) -> OpenAIChatModel:
    return OpenAIChatModel(
        LLMSettings(base_url=server.base_url, api_key=SecretStr("k"), model="summary-model", context_window=64_000)
    )


def failing_session(book: MarkerBook) -> Session:
    """A turn whose tool fails (an error result without content), and a model call that fails."""
    s = Session()
    s.user(f"查一下上海明天的天气{book.mint('e1')}")
    s.call(("c1", "weather", '{"city": "上海"}'))
    s.add("tool", tool_call_id="c1", name="weather", content=None,
          error={"type": "Timeout", "message": f"天气服务超时{book.mint('e3')}", "code": "504"})  # fmt: skip
    s.add("assistant", content=None, error={"type": "RateLimit", "message": f"模型配额用尽{book.mint('e4')}"})
    s.user(f"那就明天再试{book.mint('e5')}")
    s.answer(f"好的，明天再查{book.mint('e6')}")
    return s


def lost_markers(messages: list[dict[str, object]], book: MarkerBook) -> dict[str, list[str]]:
    shown = set(find_markers("\n".join(str(m) for m in messages)))
    return {e: [m for m in ms if m not in shown] for e, ms in book.by_event.items() if set(ms) - shown}


async def test_an_error_event_covered_by_a_summary_is_in_its_input(server: OpenAIServer) -> None:
    book = MarkerBook()
    s = failing_session(book)
    options = AssemblyOptions(add_session_summary=True)

    before = assemble("你是助手。", None, s.events, "新问题", options=options)
    assert not lost_markers(before.messages, book), "the prompt does not show every event before a summary"

    result = await Summarizer(model_for(server)).summarize("", s.events, session=SESSION)
    assert result.last_event is not None and result.last_event.event_id == s.events[-1].event_id

    after = assemble("你是助手。", summary_at(result.last_event, result.text), s.events, "新问题", options=options)
    lost = lost_markers(after.messages, book)
    assert not lost, f"events {sorted(lost)} are neither in the summary input nor visible in the request"
    sent = request_text(server.requests[-1].body)
    assert "type: Timeout, message: 天气服务超时" in sent, "the summary input reads the error as the prompt shows it"


def test_a_long_error_message_is_cut_head_and_tail_and_named_for_session_load() -> None:
    """An error text is a payload like any other: when the request must shrink it is cut, never dropped."""
    book = MarkerBook()
    s = Session()
    s.user(f"跑一下构建{book.mint('e1')}")
    s.call(("c1", "build", "{}"))
    long_message = book.mint("e3") + "编译失败：找不到符号。" * 3000 + book.mint("e3")
    s.add("tool", tool_call_id="c1", name="build", content=None, error={"type": "BuildError", "message": long_message})
    s.answer(f"构建失败了{book.mint('e4')}")
    summarizer = Summarizer(_NeverCalled())
    builder = RequestBuilder(summarizer.prompts, summarizer.counter())
    budget = 1500
    assert builder.tokens(summarizer.formatter.conversation_text(s.events), "") > budget

    plan = plan_pass(s.events, "", budget, builder, summarizer.formatter)

    assert [e.event_id for e in plan.events] == [e.event_id for e in s.events]
    assert [(c.event_id, c.part) for c in plan.cuts] == [("e3", "tool_result")]
    assert 'session_load(event_id="e3")' in plan.text
    assert all(m in plan.text for m in book.markers_of("e3")), "the head and tail of the error text are kept"


def test_a_fork_holds_an_error_event_only_as_the_prompt_shows_it() -> None:
    """The caller's request (what ``assemble`` built) holds the error text; a fork of it covers the event."""
    s = failing_session(MarkerBook())
    shown = assemble("你是助手。", None, s.events, options=AssemblyOptions()).messages
    assert fork_misses(shown, s.events, "", DEFAULT_FORMATTER) is None

    without_errors = [m for m in shown if "type: " not in str(m.get("content") or "")]
    missing = fork_misses(without_errors, s.events, "", DEFAULT_FORMATTER)
    assert missing is not None and "e3" in missing and "e4" in missing


class _NeverCalled:
    """A model for planning only (no call is made)."""

    name = "summary-model"
    context_window: int | None = 64_000
    provider_budget: int | None = None

    async def complete(self, request: object) -> object:
        raise AssertionError("planning calls no model")
