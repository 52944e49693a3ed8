from schemas import Message, SessionEvent, ToolCall
from streams.rules.threshold_text import conversation_lines
from streams.summarizer.conversation import DEFAULT_FORMATTER, ConversationFormatter

from .helpers import event


def test_default_lines_for_text_tool_call_and_result() -> None:
    events = [
        event(1, "user", "  find the invoice  "),
        event(2, "agent", "Looking.", tool_calls=[("c1", "search", '{"q":"inv-7"}'), ("c2", "ping", "{}")]),
        event(3, "agent", " 3 hits ", tool_call_id="c1", name="search"),
    ]
    assert DEFAULT_FORMATTER.conversation_text(events) == "\n".join(
        [
            "user: find the invoice",
            'agent: [Called tool: search with args: {"q":"inv-7"}]',
            "agent: [Called tool: ping]",
            "agent: Looking.",
            "agent: [search returned: 3 hits]",
        ]
    )


def test_tool_result_without_name_and_empty_result() -> None:
    assert DEFAULT_FORMATTER.event_text(event(1, "agent", "ok", tool_call_id="c")) == "agent: [tool returned: ok]"
    assert DEFAULT_FORMATTER.event_text(event(1, "agent", "  ", tool_call_id="c", name="x")) == ""


def test_tool_call_without_name_is_excluded() -> None:
    assert DEFAULT_FORMATTER.event_text(event(1, "agent", None, tool_calls=[("c", "", "{}")])) == ""


def test_reasoning_partial_and_skip_summarization_are_excluded() -> None:
    thinking = event(1, "agent", "answer", reasoning_content="secret chain of thought")
    assert DEFAULT_FORMATTER.event_text(thinking) == "agent: answer"
    assert DEFAULT_FORMATTER.event_text(event(2, "agent", "chunk", partial=True)) == ""
    assert DEFAULT_FORMATTER.event_text(event(3, "system", "Debug information", skip_summarization=True)) == ""


def test_custom_formatters_may_exclude_items() -> None:
    def short_call(call: ToolCall) -> str:
        return f"[Used tool: {call.function.name}]"

    def no_results(message: Message) -> str:
        return ""

    fmt = ConversationFormatter(tool_call=short_call, tool_result=no_results)
    events = [
        event(1, "agent", None, tool_calls=[("c1", "search", '{"q": 1}')]),
        event(2, "agent", "big result", tool_call_id="c1", name="search"),
    ]
    assert fmt.conversation_text(events) == "agent: [Used tool: search]"


def test_custom_formatter_does_not_change_threshold_text() -> None:
    e = event(1, "agent", "big result", tool_call_id="c1", name="search")
    ConversationFormatter(tool_result=lambda m: "")
    assert conversation_lines(e) == "agent: [search returned: big result]"


def test_previous_summary_is_the_first_line_in_merged_mode() -> None:
    text = DEFAULT_FORMATTER.conversation_text([event(1, "user", "hi")], previous_summary=" old facts ")
    assert text == "system: old facts\nuser: hi"


def _varied_events() -> list[SessionEvent]:
    return [
        event(0, "user", "  请帮我看看这个问题 M1 \n"),
        event(1, "agent", "好的，我来分析一下"),
        event(2, "agent", "   "),
        event(3, "agent", None),
        event(4, "agent", "thinking only", reasoning_content="推理"),
        event(5, "agent", "partial chunk", partial=True),
        event(6, "agent", "skipped", skip_summarization=True),
        event(7, "agent", "calling", tool_calls=[("c1", "run", '{"a": 1}')]),
        event(8, "tool", "结果", tool_call_id="c1", name="run"),
        event(9, "agent", "result by role", role="tool"),
        event(10, "system", "系统消息", role="system"),
        event(11, "agent", None, error={"type": "RateLimit", "message": "slow down"}),
        event(12, "agent", "", error={"type": "Timeout", "message": None}),
        event(13, "agent", " 有内容的错误 ", error={"type": "Partial", "message": "cut"}),
        event(14, "agent", "error, skipped", skip_summarization=True, error={"type": "E", "message": "m"}),
    ]


def test_the_text_of_an_event_is_its_lines_joined() -> None:
    # event_text answers a plain message without building its lines: the same text as the lines give.
    formatter = ConversationFormatter()
    for e in _varied_events():
        assert formatter.event_text(e) == "\n".join(formatter.event_lines(e)), e.event_id


def test_a_formatter_that_writes_its_own_lines_is_used_for_the_text() -> None:
    class Shouting(ConversationFormatter):
        def event_lines(self, event: SessionEvent) -> list[str]:
            return [line.upper() for line in super().event_lines(event)]

    assert Shouting().event_text(event(1, "agent", "quiet")) == "AGENT: QUIET"
