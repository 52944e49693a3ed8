"""Issue 11 item 5: an event larger than the input budget is cut head + tail, never freezes its key.

Payloads go first (head + tail, with a marker naming the event for
``session_load``); prefixes next; the previous summary only when it alone
does not fit beside the smallest form of the conversation.
"""

from __future__ import annotations

import re

import pytest

from projections.textcut import head_and_tail, is_boundary
from schemas import SessionEvent, SummaryReport
from streams.rules.tokens import SimpleTokenCounter, TiktokenCounter
from streams.summarizer.budget import TRUNCATION_MARKER, truncate_middle
from streams.summarizer.conversation import DEFAULT_FORMATTER
from streams.summarizer.hooks import PreSummaryContext, SummaryHooks
from streams.summarizer.model import ContextLengthError
from streams.summarizer.payloads import MIN_PAYLOAD_KEEP, cut_event, cut_marker
from streams.summarizer.plan import RequestBuilder, plan_pass
from streams.summarizer.prompts import build_prompts
from streams.summarizer.request import count_request
from streams.summarizer.summarizer import Summarizer

from .helpers import SESSION, ScriptedModel, event, user_text

COUNTER = SimpleTokenCounter()
LOAD = re.compile(r'session_load\(event_id="([^"]+)"\)')


def tool_round(start: int, result: str, args: str = '{"q": 1}', call: str = "c1") -> list[SessionEvent]:
    return [
        event(start, "user", "please look it up"),
        event(start + 1, "agent", None, tool_calls=[(call, "fetch", args)]),
        event(start + 2, "agent", result, tool_call_id=call, name="fetch"),
        event(start + 3, "agent", "done"),
    ]


async def test_a_25kb_tool_result_with_an_unknown_model_is_summarized_not_refused() -> None:
    # The reproduction of item 5: unknown model -> 8192 window -> 5,734-token budget.
    model = ScriptedModel(name="never-heard-of-it", context_window=None)
    summarizer = Summarizer(model, token_counter=COUNTER)
    assert summarizer.input_budget() == 5734
    result_text = "HEAD⟦m2⟧ " + "日志行 " * 3000 + "deep ⟦m2mid⟧ " + "x" * 14000 + " TAIL⟦m2end⟧"
    assert len(result_text) > 25_000
    events = tool_round(0, result_text)
    result = await summarizer.summarize("prev ⟦p⟧", events, session=SESSION)
    assert result.caught_up and result.covered_events == 4
    assert len(model.requests) == 1
    sent = user_text(model.requests[0])
    assert count_request(model.requests[0], COUNTER) <= 5734
    assert "HEAD⟦m2⟧" in sent and "TAIL⟦m2end⟧" in sent and "⟦m2mid⟧" not in sent
    assert LOAD.findall(sent) == ["e2"]
    assert "of this tool result (call c1) left out" in sent
    assert "prev ⟦p⟧" in sent  # the previous summary is whole
    assert not result.report.truncated_previous_summary
    (cut,) = result.report.truncated_payloads
    assert (cut.event_id, cut.part, cut.tool_call_id, cut.chars) == ("e2", "tool_result", "c1", len(result_text))
    assert MIN_PAYLOAD_KEEP <= cut.kept_chars < cut.chars


async def test_the_next_job_of_the_key_is_summarized_too() -> None:
    model = ScriptedModel("S1", "S2", name="never-heard-of-it", context_window=None)
    summarizer = Summarizer(model, token_counter=COUNTER)
    first = tool_round(0, "a" * 30_000)
    done = await summarizer.summarize("", first, session=SESSION)
    later = [*tool_round(4, "b" * 40_000, call="c2"), event(8, "user", "again")]
    again = await summarizer.summarize(done.text, later, session=SESSION)
    assert again.covered_events == 5 and again.text == "S2"
    assert "S1" in user_text(model.requests[1])


async def test_large_tool_arguments_and_message_contents_are_cut_too() -> None:
    model = ScriptedModel(context_window=1000)  # budget 700
    events = [
        event(0, "user", "U-HEAD " + "用户输入" * 2000 + " U-TAIL"),
        event(1, "agent", None, tool_calls=[("c1", "write", '{"body": "' + "z" * 9000 + '"}'), ("c2", "ls", "{}")]),
        event(2, "agent", "ok", tool_call_id="c1", name="write"),
        event(3, "agent", "listing", tool_call_id="c2", name="ls"),
        event(4, "agent", "A-HEAD " + "answer " * 900 + "A-TAIL"),
    ]
    result = await Summarizer(model, token_counter=COUNTER).summarize("", events, session=SESSION)
    assert result.covered_events == 5 and len(model.requests) == 1
    sent = user_text(model.requests[0])
    assert count_request(model.requests[0], COUNTER) <= 700
    for marker in ("U-HEAD", "U-TAIL", "A-HEAD", "A-TAIL", '{"body": "z', 'z"}', "[ls returned: listing]"):
        assert marker in sent
    parts = {(c.event_id, c.part, c.tool_call_id) for c in result.report.truncated_payloads}
    assert parts == {("e0", "content", None), ("e1", "tool_arguments", "c1"), ("e4", "content", None)}
    assert "the arguments of this tool call (call c1) left out" in sent
    assert sorted(LOAD.findall(sent)) == ["e0", "e1", "e4"]


async def test_payloads_are_cut_before_any_event_waits_and_only_large_ones() -> None:
    model = ScriptedModel(context_window=2000)  # budget 1400
    events = tool_round(0, "r" * 20_000) + tool_round(4, "small result", call="c2")
    result = await Summarizer(model, token_counter=COUNTER).summarize("", events, session=SESSION)
    assert result.covered_events == 8 and not result.report.partial_prefix and result.passes == 1
    assert [c.event_id for c in result.report.truncated_payloads] == ["e2"]
    sent = user_text(model.requests[0])
    assert "[fetch returned: small result]" in sent
    # The cut keeps as much as the budget allows, not just the minimum.
    assert count_request(model.requests[0], COUNTER) > 1400 - 40
    assert result.report.truncated_payloads[0].kept_chars > 4000


async def test_the_previous_summary_is_cut_only_when_it_alone_does_not_fit() -> None:
    model = ScriptedModel(context_window=1000)  # budget 700
    events = tool_round(0, "r" * 50_000)
    prompt = "S {previous_summary}\nC {conversation_text}"
    fits_alone = "P-HEAD " + "p" * 2200 + " P-TAIL"  # ~550 tokens: fits beside the smallest form
    result = await Summarizer(model, prompt=prompt, token_counter=COUNTER).summarize(fits_alone, events)
    assert not result.report.truncated_previous_summary
    assert fits_alone in user_text(model.requests[0])
    assert result.report.truncated_payloads

    too_large = "P-HEAD " + "p" * 4000 + " P-TAIL"
    sent_before = len(model.requests)
    result = await Summarizer(model, prompt=prompt, token_counter=COUNTER).summarize(too_large, events)
    assert result.report.truncated_previous_summary and result.covered_events == 4
    # The smallest complete prefix (user, call, result) with the cut previous summary; the answer next.
    request = model.requests[sent_before]
    assert result.passes == 2 and result.report.partial_prefix
    assert request.source is not None
    kept = request.source.previous_summary
    assert TRUNCATION_MARKER in kept and kept.startswith("P-HEAD") and kept.endswith("P-TAIL")
    # Beside the smallest form: every payload at the minimum.
    (cut,) = result.report.truncated_payloads
    assert cut.kept_chars <= MIN_PAYLOAD_KEEP


def test_plan_with_a_tiktoken_counter_and_cjk_payload() -> None:
    counter = TiktokenCounter("gpt-4o")
    builder = RequestBuilder(build_prompts("之前的摘要：{previous_summary}\n对话：{conversation_text}"), counter)
    events = tool_round(0, "数据库查询结果：" + "北京上海广州深圳" * 4000 + "结束")
    plan = plan_pass(events, "之前：⟦p1⟧", 1500, builder, DEFAULT_FORMATTER)
    assert len(plan.events) == 4 and plan.cuts and not plan.truncated_previous
    assert count_request(plan.request, counter) <= 1500
    assert "数据库查询结果" in plan.text and plan.text.rstrip().endswith("agent: done")
    assert "\ufffd" not in plan.text


@pytest.mark.parametrize(
    "text",
    [
        "e\u0301" * 100,  # combining acute accents
        "👍🏽" * 100,  # skin-tone modifiers
        "👨\u200d👩\u200d👧" * 50,  # ZWJ families
        "🇨🇳🇯🇵" * 50,  # flag pairs
        "\u1100\u1161\u11a8" * 100,  # conjoining Hangul jamo
        "中文混合English" * 40,
    ],
)
@pytest.mark.parametrize("keep", [1, 2, 3, 7, 64, 101])
def test_cuts_fall_on_character_boundaries(text: str, keep: int) -> None:
    head, tail = head_and_tail(text, keep)
    assert len(head) + len(tail) <= keep
    assert text.startswith(head) and text.endswith(tail)
    assert is_boundary(text, len(head)) and is_boundary(text, len(text) - len(tail))
    cut = truncate_middle(text, keep)
    first = cut.partition(TRUNCATION_MARKER)[0]
    assert first and is_boundary(text, len(first))


def test_lone_surrogate_pairs_stay_whole() -> None:
    text = "\ud83d\ude00" * 50  # a surrogate-escaped emoji, as json can decode it
    head, tail = head_and_tail(text, 7)
    assert len(head) % 2 == 0 and len(tail) % 2 == 0


def test_cut_event_marker_names_event_and_call() -> None:
    original = event(5, "agent", "x" * 1000, tool_call_id="call_9", name="grep")
    cut, cuts = cut_event(original, 100)
    assert cut.message.content is not None and len(cut.message.content) < 300
    assert cut_marker("tool_result", 900, "e5", "call_9") in cut.message.content
    expected = (
        '[… 900 chars of this tool result (call call_9) left out; session_load(event_id="e5") returns it whole …]'
    )
    assert expected in cut.message.content
    assert cuts[0].kept_chars == 100 and original.message.content == "x" * 1000
    assert cut_event(original, None) == (original, ())
    assert cut_event(original, 5000) == (original, ())


def test_old_reports_without_the_new_field_still_parse() -> None:
    report = SummaryReport.model_validate({"trigger": {"name": "manual"}, "truncated_previous_summary": True})
    assert report.truncated_payloads == ()


HOOK_PROMPT = "S {previous_summary}\nC {conversation_text}"


async def test_a_hook_that_adds_text_still_gets_payloads_cut_before_the_previous_summary() -> None:
    def add_note(ctx: PreSummaryContext) -> None:
        ctx.text = "(hook) " + ctx.text + "\nnote from the pre-summary hook: " + "n" * 200

    model = ScriptedModel(context_window=1000)  # budget 700
    previous = "P-HEAD ⟦p⟧ " + "p" * 1500 + " P-TAIL"
    s = Summarizer(model, prompt=HOOK_PROMPT, token_counter=COUNTER, hooks=SummaryHooks(pre_summary=add_note))
    result = await s.summarize(previous, tool_round(0, "r" * 50_000))
    sent = user_text(model.requests[0])
    assert previous in sent and "note from the pre-summary hook" in sent and sent.count("(hook) ") == 1
    assert count_request(model.requests[0], COUNTER) <= 700
    assert not result.report.truncated_previous_summary
    assert [c.event_id for c in result.report.truncated_payloads] == ["e2"]


async def test_the_half_budget_retry_after_a_hook_cuts_payloads_not_the_previous_summary() -> None:
    model = ScriptedModel(ContextLengthError("maximum context length exceeded"), "S", context_window=1000)
    previous = "P-HEAD ⟦p⟧ " + "p" * 1000 + " P-TAIL"  # ~250 tokens: fits beside the smallest form in 350
    s = Summarizer(model, prompt=HOOK_PROMPT, token_counter=COUNTER, hooks=SummaryHooks(pre_summary=lambda c: None))
    result = await s.summarize(previous, tool_round(0, "r" * 50_000))
    assert result.text == "S" and [c.budget_tokens for c in result.report.calls] == [700, 350]
    assert previous in user_text(model.requests[1])
    assert count_request(model.requests[1], COUNTER) <= 350
    assert not result.report.truncated_previous_summary
