import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import ErrorInfo
from streams.rules.counters import F_USER
from streams.rules.eligibility import has_valid_content, is_counted, is_model_output, is_user_turn, may_trigger
from streams.rules.event_facts import event_facts, threshold_tokens
from streams.rules.threshold_text import conversation_length, conversation_lines, reasoning_text
from streams.rules.tokens import SimpleTokenCounter, TiktokenCounter

from .factory import ev

TIKTOKEN = TiktokenCounter("gpt-4o")


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
        # The role decides, never the author: an assistant message labelled "user" is model output.
        (ev("a", author="user"), True),
        (ev("a", role="user", author="alice"), False),
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


@settings(max_examples=200, deadline=None)
@given(
    content=st.one_of(st.none(), st.text(max_size=30)),
    reasoning=st.one_of(st.none(), st.text(max_size=10)),
    calls=st.lists(st.tuples(st.text(max_size=6), st.sampled_from(["", "{}", " {} ", '{"a": 1}'])), max_size=3),
    result_of=st.one_of(st.none(), st.just("c0")),
    name=st.one_of(st.none(), st.text(max_size=5)),
    author=st.sampled_from(["agent", "user", "a-much-longer-author"]),
)
def test_conversation_length_matches_the_text(
    content: str | None,
    reasoning: str | None,
    calls: list[tuple[str, str]],
    result_of: str | None,
    name: str | None,
    author: str,
) -> None:
    event = ev(
        "e",
        content=content,
        role="tool" if result_of else "assistant",
        tool_calls=[(f"c{i}", fn, args) for i, (fn, args) in enumerate(calls)] if not result_of else None,
        tool_call_id=result_of,
        name=name,
        author=author,
        reasoning_content=reasoning,
    )
    assert conversation_length(event) == len(conversation_lines(event))
    for counter in (SimpleTokenCounter(), SimpleTokenCounter(2.5)):
        expected = counter.count_text(conversation_lines(event)) + counter.count_text(reasoning_text(event))
        assert threshold_tokens(event, counter)[0] == expected
    # event_facts inlines the eligibility rules
    for counter in (SimpleTokenCounter(), SimpleTokenCounter(3), TIKTOKEN):
        facts = event_facts(event, counter)
        assert (facts.entry.tokens, facts.entry.text_len) == threshold_tokens(event, counter)
    assert facts.model_output == is_model_output(event)
    assert bool(facts.entry.flags & F_USER) == is_user_turn(event)


@pytest.mark.parametrize(
    ("author", "role", "tool_call_id", "user_turn"),
    [
        ("user", "user", None, True),
        ("alice", "user", None, True),
        ("user", "assistant", None, False),
        ("alice", "user", "c1", False),  # a tool result sent with role user
        ("user", "tool", "c1", False),
    ],
)
def test_one_rule_for_a_user_turn_in_trigger_and_summarizer(
    author: str, role: str, tool_call_id: str | None, user_turn: bool
) -> None:
    from streams.summarizer.selection import keep_recent_rounds

    event = ev("a", role=role, author=author, tool_call_id=tool_call_id)
    assert is_user_turn(event) is user_turn
    assert bool(event_facts(event).entry.flags & F_USER) is user_turn
    # the summarizer keeps back from the last user turn: the event alone iff it is one
    assert keep_recent_rounds(1)([ev("q", role="user"), event]) == (1 if user_turn else 2)
