import pytest

from schemas import ErrorInfo
from streams.rules.eligibility import has_valid_content, is_counted, is_model_output, may_trigger
from streams.rules.event_facts import event_facts
from streams.rules.threshold_text import conversation_lines, reasoning_text
from streams.rules.tokens import SimpleTokenCounter

from .factory import ev


def test_conversation_lines_follow_the_default_formatters() -> None:
    call = ev("a", tool_calls=[("c1", "search", '{"q": "x"}'), ("c2", "now", "{}"), ("c3", "", "{}")], content=None)
    assert conversation_lines(call) == 'agent: [Called tool: search with args: {"q": "x"}]\nagent: [Called tool: now]'
    result = ev("b", role="tool", content="  42  ", tool_call_id="c1", name="search")
    assert conversation_lines(result) == "agent: [search returned: 42]"
    unnamed = ev("c", role="tool", content="ok", tool_call_id="c1")
    assert conversation_lines(unnamed) == "agent: [tool returned: ok]"
    assert conversation_lines(ev("d", role="tool", content="  ", tool_call_id="c1")) == ""
    assert conversation_lines(ev("e", content="  hi  ")) == "agent: hi"


def test_reasoning_is_separate_from_conversation_text() -> None:
    event = ev("a", content="answer", reasoning_content=" because ")
    assert conversation_lines(event) == "agent: answer"
    assert reasoning_text(event) == "because"


def test_tokens_count_text_and_reasoning() -> None:
    counter = SimpleTokenCounter()
    plain = event_facts(ev("a", content="x" * 393), counter)
    assert plain.entry.tokens == 100  # "agent: " + 393 runes = 400 runes / 4
    with_reasoning = event_facts(ev("a", content="x" * 393, reasoning_content="y" * 40), counter)
    assert with_reasoning.entry.tokens == 110


def test_partial_and_skipped_events_are_not_counted() -> None:
    assert not is_counted(ev("a", partial=True))
    assert not is_counted(ev("a", skip_summarization=True))
    facts = event_facts(ev("a", partial=True))
    assert not facts.counted and facts.entry.tokens == 0


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (ev("a"), True),
        (ev("a", role="user"), False),
        (ev("a", author="user"), False),
        (ev("a", role="system"), False),
        (ev("a", content=None, tool_calls=[("c", "f", "{}")]), False),
        (ev("a", content="calling", tool_calls=[("c", "f", "{}")]), False),
        (ev("a", role="tool", content="r", tool_call_id="c"), True),
        (ev("a", partial=True), False),
        (ev("a", skip_summarization=True), False),
        (ev("a", error=ErrorInfo(type="x", message="boom")), False),
        (ev("a", content="   "), False),
    ],
)
def test_model_output(event: object, expected: bool) -> None:
    assert is_model_output(event) is expected  # type: ignore[arg-type]


def test_tool_result_triggers_only_when_its_round_is_complete() -> None:
    result = ev("a", role="tool", content="r", tool_call_id="c1")
    assert not may_trigger(result, ["c2"])
    assert may_trigger(result, [])
    assert not has_valid_content(ev("a", content=None).message)
