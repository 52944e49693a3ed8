import asyncio
from dataclasses import replace

import pytest

from schemas import SessionEvent, SummaryBoundary, SummaryReport, TriggerReport
from streams.errors import PermanentError, RetryableError
from streams.rules.boundaries import BOUNDARY_FORMAT_VERSION
from streams.rules.tokens import SimpleTokenCounter
from streams.summarizer.budget import TRUNCATION_MARKER, safe_prefix_ends
from streams.summarizer.conversation import DEFAULT_FORMATTER
from streams.summarizer.fork import fork_misses
from streams.summarizer.hooks import (
    AfterModelArgs,
    BeforeModelArgs,
    BeforeModelResult,
    PostSummaryContext,
    PreSummaryContext,
    PreSummaryHook,
    SummaryHooks,
)
from streams.summarizer.model import ContextLengthError, ModelResponse, ModelUsage
from streams.summarizer.plan import (
    PreviousSummaryTooLargeError,
    RequestBuilder,
    SourceTooLargeError,
    covered_prefix,
    plan_pass,
)
from streams.summarizer.prompts import SOURCE_BOUNDARY, build_prompts
from streams.summarizer.request import ChatRequest, count_request
from streams.summarizer.selection import skip_last
from streams.summarizer.summarizer import CutOffSummaryError, EmptySummaryError, Summarizer, SummarySkipped

from .helpers import SESSION, EchoModel, ScriptedModel, event, markers, request_messages, rounds, user_text

COUNTER = SimpleTokenCounter()
SMALL = "{conversation_text}"


def make(model: ScriptedModel, **kw: object) -> Summarizer:
    kw.setdefault("prompt", SMALL)
    return Summarizer(model, token_counter=COUNTER, **kw)  # type: ignore[arg-type]


async def test_single_pass_result_boundary_and_stats() -> None:
    model = ScriptedModel("S", usage=ModelUsage(prompt_tokens=123, cached_tokens=45, completion_tokens=3))
    trigger = TriggerReport(name="event_threshold", value=4, threshold=3, unit="events")
    result = await make(model).summarize("", rounds(2), trigger, session=SESSION)
    assert result.text == "S"
    assert result.caught_up and result.passes == 1 and result.covered_events == 4
    assert result.boundary(3).last_event_id == "e3"
    # The boundary's version is its format version; the summary version lives on the summary record.
    assert result.boundary(3).version == BOUNDARY_FORMAT_VERSION == 1
    assert result.report.trigger == trigger
    (call,) = result.report.calls
    assert call.mode == "standalone"
    assert call.estimated_prompt_tokens == count_request(model.requests[0], COUNTER)
    assert (call.provider_prompt_tokens, call.provider_cached_tokens, call.completion_tokens) == (123, 45, 3)
    assert result.stats.original_event_count == 4
    assert result.stats.compressed_event_count == 1
    assert result.stats.compression_ratio == 75.0
    assert result.stats.input_tokens == 123
    assert result.model == "scripted"


async def test_oversized_delta_is_summarized_in_complete_prefixes() -> None:
    model = ScriptedModel("S1", "S2", "S3", "S4", context_window=100)  # budget 70
    events = rounds(4)
    result = await make(model).summarize("", events, session=SESSION)
    assert result.caught_up
    assert result.covered_events == 8
    assert result.passes == len(model.requests) > 1
    assert result.report.partial_prefix
    assert result.last_event is not None and result.last_event.event_id == "e7"
    for request in model.requests:
        assert count_request(request, COUNTER) <= 70
    # Each later pass rolls the previous pass's summary forward.
    assert user_text(model.requests[1]).startswith("system: S1\n")
    assert result.text == f"S{result.passes}"
    covered = "\n".join(user_text(r) for r in model.requests)
    for e in events:
        assert (e.message.content or "") in covered


async def test_max_passes_leaves_the_rest_for_later() -> None:
    model = ScriptedModel(context_window=100)
    result = await make(model, max_passes=1).summarize("", rounds(4), session=SESSION)
    assert not result.caught_up
    assert result.remaining_events == 8 - result.covered_events > 0
    assert result.stats.compressed_event_count == 1 + result.remaining_events


async def test_delta_without_fitting_prefix_is_refused_before_calling_the_model() -> None:
    seen: list[tuple[SummaryReport, BaseException | None]] = []
    model = ScriptedModel(context_window=100)
    # Payloads are cut to their smallest form first; twelve user messages with no answer between
    # them have no complete prefix, and their smallest forms still exceed the 70-token budget.
    events = [event(i, "user", f"w{i} " * 400) for i in range(12)] + [event(12, "agent", "ok")]
    s = make(model, hooks=SummaryHooks(report=lambda r, e: seen.append((r, e))))
    with pytest.raises(SourceTooLargeError, match="refusing to omit unsummarized conversation"):
        await s.summarize("", events, session=SESSION)
    assert model.requests == []
    assert isinstance(seen[0][1], SourceTooLargeError)
    assert seen[0][0].calls == ()


async def test_smallest_prefix_too_large_fails_closed() -> None:
    events = [event(i, "user", "w " * 400) for i in range(12)]
    events += [event(12, "agent", "ok " * 200), event(13, "user", "next")]
    with pytest.raises(SourceTooLargeError, match="smallest complete prefix"):
        await make(ScriptedModel(context_window=100)).summarize("", events, session=SESSION)


async def test_previous_summary_is_cut_head_and_tail_but_the_conversation_is_whole() -> None:
    model = ScriptedModel(context_window=100)
    previous = "HEAD " + "p" * 1000 + " TAIL"
    result = await make(model).summarize(previous, [event(1, "user", "keep me"), event(2, "agent", "intact")])
    text = user_text(model.requests[0])
    assert TRUNCATION_MARKER in text
    assert "system: HEAD" in text and "TAIL" in text
    assert text.endswith("user: keep me\nagent: intact")
    assert count_request(model.requests[0], COUNTER) <= 70
    assert result.report.truncated_previous_summary


async def test_prefix_with_whole_previous_summary_preferred_over_cutting_it() -> None:
    model = ScriptedModel("S1", "S2", context_window=200)  # budget 140
    previous = "p" * 300  # 75 tokens
    result = await make(model).summarize(previous, rounds(3), session=SESSION)
    assert "p" * 300 in user_text(model.requests[0])
    assert not result.report.truncated_previous_summary
    assert result.caught_up


async def test_one_retry_at_half_budget_after_a_context_length_error() -> None:
    model = ScriptedModel(ContextLengthError("maximum context length exceeded"), "good", context_window=1000)
    result = await make(model).summarize("", rounds(2), session=SESSION)
    assert result.text == "good"
    assert len(model.requests) == 2
    first_call, second_call = result.report.calls
    assert first_call.outcome == "retried" and first_call.budget_tokens == 700
    assert second_call.outcome == "ok" and second_call.budget_tokens == 350


@pytest.mark.parametrize("empty", ["", "   "])
async def test_empty_answer_is_asked_again_with_the_same_request_at_the_same_budget(empty: str) -> None:
    # The previous summary is larger than half the budget: a half-budget retry would cut it.
    previous = " ".join(f"P{i}" for i in range(120))
    events = [event(1, "user", "M1 please"), event(2, "agent", "M2 done")]
    model = EchoModel(empty, context_window=600)
    prompt = "prev={previous_summary}\nnew={conversation_text}"
    result = await make(model, prompt=prompt).summarize(previous, events, session=SESSION)
    assert len(model.requests) == 2
    assert model.requests[1].messages == model.requests[0].messages
    assert TRUNCATION_MARKER not in user_text(model.requests[1])
    assert set(markers(result.text)) == {f"P{i}" for i in range(120)} | {"M1", "M2"}
    first_call, second_call = result.report.calls
    assert (first_call.outcome, first_call.error) == ("retried", "empty answer")
    assert first_call.budget_tokens == second_call.budget_tokens == 420
    assert second_call.outcome == "ok"
    assert not result.report.truncated_previous_summary


async def test_empty_answers_fail_as_a_retryable_failure_never_as_a_cut() -> None:
    model = ScriptedModel("", "", "", "never asked")
    reports: list[tuple[SummaryReport, BaseException | None]] = []
    s = make(model, empty_answer_retries=2, hooks=SummaryHooks(report=lambda r, e: reports.append((r, e))))
    with pytest.raises(EmptySummaryError, match=r"generated empty summary \(input_chars=") as info:
        await s.summarize("", rounds(1), session=SESSION)
    assert isinstance(info.value, RetryableError)
    assert len(model.requests) == 3
    assert all(r.messages == model.requests[0].messages for r in model.requests)
    report, error = reports[0]
    assert error is info.value
    assert [c.outcome for c in report.calls] == ["retried", "retried", "failed"]
    assert {c.budget_tokens for c in report.calls} == {700}


class CutOffEcho(EchoModel):
    """Echoes the markers it received, the first ``cut`` answers stopped half-way by the provider."""

    def __init__(self, reason: str, cut: int, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.reason, self.cut = reason, cut

    async def complete(self, request: ChatRequest) -> ModelResponse:
        whole = await super().complete(request)
        if len(self.requests) > self.cut:
            return replace(whole, finish_reason="stop")
        found = whole.text.split()
        return replace(whole, text=" ".join(found[: len(found) // 2]) + " 然后新的一轮", finish_reason=self.reason)


def cjk_delta() -> list[SessionEvent]:
    return [
        event(1, "user", "M1 请把报告翻译成中文"),
        event(2, "agent", "M2 好的，这是译文。"),
        event(3, "user", "M3 谢谢"),
    ]


@pytest.mark.parametrize("reason", ["length", "content_filter"])
async def test_an_answer_the_provider_cut_off_is_asked_again_never_stored(reason: str) -> None:
    previous = "前情提要：" + " ".join(f"P{i}" for i in range(12))
    model = CutOffEcho(reason, cut=1)
    result = await make(model).summarize(previous, cjk_delta(), session=SESSION)
    # Every marker of the previous summary and the delta is in what was stored: the half answer was not.
    assert set(markers(result.text)) == {f"P{i}" for i in range(12)} | {"M1", "M2", "M3"}
    assert "然后新的一轮" not in result.text
    assert model.requests[1].messages == model.requests[0].messages
    first, second = result.report.calls
    assert (first.outcome, first.error) == ("retried", f"answer cut off (finish_reason={reason})")
    assert (second.outcome, second.error) == ("ok", None)
    assert first.budget_tokens == second.budget_tokens


async def test_answers_cut_off_on_every_try_fail_as_retryable_and_move_no_boundary() -> None:
    previous = "前情提要：" + " ".join(f"P{i}" for i in range(12))
    model = CutOffEcho("length", cut=3)
    reports: list[tuple[SummaryReport, BaseException | None]] = []
    s = make(model, empty_answer_retries=2, hooks=SummaryHooks(report=lambda r, e: reports.append((r, e))))
    with pytest.raises(CutOffSummaryError, match=r"cut off by the provider .*finish_reason=length") as info:
        await s.summarize(previous, cjk_delta(), session=SESSION)
    assert isinstance(info.value, RetryableError)
    assert len(model.requests) == 3
    report, error = reports[0]
    assert error is info.value
    assert [c.outcome for c in report.calls] == ["retried", "retried", "failed"]
    assert {c.error for c in report.calls} == {"answer cut off (finish_reason=length)"}


async def test_empty_answer_after_a_context_length_retry_is_asked_again_at_that_budget() -> None:
    model = ScriptedModel(ContextLengthError("too many tokens"), "", "S", context_window=1000)
    result = await make(model).summarize("", rounds(2), session=SESSION)
    assert result.text == "S"
    assert [c.outcome for c in result.report.calls] == ["retried", "retried", "ok"]
    assert [c.budget_tokens for c in result.report.calls] == [700, 350, 350]
    assert model.requests[2].messages == model.requests[1].messages


async def test_retry_may_shrink_to_a_smaller_prefix() -> None:
    model = ScriptedModel(ContextLengthError("too many tokens"), "S", "T", context_window=200)
    result = await make(model).summarize("", rounds(4), session=SESSION)
    assert count_request(model.requests[1], COUNTER) <= 70
    assert result.caught_up


async def test_other_errors_are_not_retried_here() -> None:
    model = ScriptedModel(RetryableError("429", retry_after=2.0))
    with pytest.raises(RetryableError) as info:
        await make(model).summarize("", rounds(1), session=SESSION)
    assert info.value.retry_after == 2.0
    assert len(model.requests) == 1


async def test_cancellation_propagates_and_is_reported() -> None:
    errors: list[BaseException | None] = []
    model = ScriptedModel(asyncio.CancelledError())
    s = make(model, hooks=SummaryHooks(report=lambda r, e: errors.append(e)))
    with pytest.raises(asyncio.CancelledError):
        await s.summarize("", rounds(1), session=SESSION)
    assert isinstance(errors[0], asyncio.CancelledError)


async def test_nothing_to_summarize() -> None:
    s = make(ScriptedModel())
    with pytest.raises(SummarySkipped, match="no events to summarize"):
        await s.summarize("prev", [], session=SESSION)
    with pytest.raises(SummarySkipped, match="no events to summarize"):
        await make(ScriptedModel(), skip_recent=skip_last(5)).summarize("", rounds(1))
    silent = [event(1, "agent", "  ", tool_call_id="c")]
    with pytest.raises(SummarySkipped, match="no conversation text extracted"):
        await s.summarize("", silent, session=SESSION)


async def test_forced_rewrite_of_previous_summary_only() -> None:
    model = ScriptedModel("rewritten")
    s = make(model, prompt="prev={previous_summary} new={conversation_text}")
    result = await s.summarize("old", [], force=True, session=SESSION)
    assert result.text == "rewritten" and result.last_event is None
    assert user_text(model.requests[0]) == "prev=old new="
    # The boundary stays where it was, in the current boundary format.
    previous = SummaryBoundary(cutoff_at="2025-03-01T09:00:00Z", last_event_id="e9", version=0)
    assert result.boundary(4, previous) == previous.model_copy(update={"version": BOUNDARY_FORMAT_VERSION})


async def test_skip_recent_holds_events_back() -> None:
    model = ScriptedModel()
    result = await make(model, skip_recent=skip_last(2)).summarize("", rounds(3), session=SESSION)
    assert result.covered_events == 4 and result.held_back_events == 2
    assert result.last_event is not None and result.last_event.event_id == "e3"
    assert "question 2" not in user_text(model.requests[0])
    assert result.stats.compressed_event_count == 3


async def test_max_summary_length_cuts_at_a_sentence() -> None:
    answer = "First fact. Second fact is longer. Third."
    model = ScriptedModel(answer, answer)  # asked to shorten it, the model answers the same
    result = await make(model, max_summary_length=30).summarize("", rounds(1))
    assert result.text == "First fact."
    cut = result.report.length_cut
    assert cut is not None and (cut.max_chars, cut.answer_chars, cut.rewrite_chars, cut.kept_chars) == (30, 41, 41, 11)


# The Python guide's own Chinese prompt (its "自定义提示模板" example).
GUIDE_PROMPT_ZH = (
    "请总结以下对话，重点关注：\n1. 关键决策\n2. 重要信息\n3. 行动计划\n\n对话内容：\n{conversation_text}\n\n总结："
)


async def test_max_summary_length_keeps_a_chinese_summary_and_rolls_it_forward() -> None:
    sentences = [f"第{i}条决定：用户要求保留标记M{i}并在周五前完成迁移。" for i in range(30)]
    answer = "".join(sentences)
    assert len(answer) > 720
    model = ScriptedModel(answer, answer, "下一版摘要。")  # the shorter rewrite asked for is as long
    s = make(model, prompt=GUIDE_PROMPT_ZH, max_summary_length=600, max_summary_words=None)
    events = [event(1, "user", "请帮我迁移数据库"), event(2, "agent", "好的，我会在周五前完成。")]
    result = await s.summarize("", events, session=SESSION)
    assert result.report.length_cut is not None and result.report.length_cut.kept_chars == len(result.text)
    assert 0 < len(result.text) <= 600 and result.text != "…"
    assert answer.startswith(result.text) and result.text.endswith("。")
    kept = [f"M{i}" for i in range(30) if f"M{i}" in result.text]
    assert kept == [f"M{i}" for i in range(len(kept))] and len(kept) >= 20
    # What rolls forward as the previous summary is that text.
    await s.summarize(result.text, [event(3, "user", "还有别的吗")], session=SESSION)
    assert result.text in user_text(model.requests[2])


# Cache-safe forking ---------------------------------------------------------------------------

PARENT = {
    "messages": [{"role": "system", "content": "agent rules"}, *request_messages(rounds(1))],
    "tools": [{"type": "function", "function": {"name": "t", "parameters": {}}}],
    "stream": True,
}


async def test_fork_uses_the_callers_request() -> None:
    model = ScriptedModel()
    result = await make(model, max_summary_words=50, prompt=None).summarize(
        "", rounds(1), model_request=PARENT, session=SESSION
    )
    request = model.requests[0]
    assert request.messages[:3] == PARENT["messages"]
    assert request.messages[3]["role"] == "user" and "50 words" in request.messages[3]["content"]
    assert request.tools == PARENT["tools"]
    assert request.params["stream"] is False
    assert result.fork_used and result.report.calls[0].mode == "cache_safe_fork"
    assert PARENT["stream"] is True


async def test_fork_retry_is_standalone_with_the_source_boundary() -> None:
    model = ScriptedModel(ContextLengthError("maximum context length"), "S")
    await make(model).summarize("", rounds(1), model_request=PARENT, session=SESSION)
    second = model.requests[1]
    assert len(second.messages) == 1
    assert SOURCE_BOUNDARY in user_text(second)
    assert "question 0" in user_text(second)


async def test_fork_that_cannot_fit_falls_back_to_standalone() -> None:
    big = {"messages": [{"role": "user", "content": "z " * 2000}]}
    model = ScriptedModel(context_window=300)
    result = await make(model).summarize("", rounds(1), model_request=big, session=SESSION)
    assert not result.fork_used
    assert SOURCE_BOUNDARY in user_text(model.requests[0])


async def test_fork_disabled_ignores_the_callers_request() -> None:
    model = ScriptedModel()
    await make(model, cache_safe_forking=False).summarize("", rounds(1), model_request=PARENT)
    assert SOURCE_BOUNDARY not in user_text(model.requests[0])


async def test_settings_choose_the_fork_prompt_and_can_turn_forking_off() -> None:
    from schemas.settings import Settings
    from streams.summarizer import build_summarizer

    model = ScriptedModel()
    summary = {"fork_prompt": "Condense all of the above for later: {max_summary_words} words max."}
    forked = build_summarizer(Settings(summary=summary), model=model)
    await forked.summarize("", rounds(1), model_request=PARENT, session=SESSION)
    assert model.requests[0].messages[-1]["content"].startswith("Condense all of the above for later: 200 words")
    off = build_summarizer(Settings(summary={"cache_safe_forking": False}), model=ScriptedModel())
    assert off.metadata()["cache_safe_forking"] is False


# Hooks and callbacks ---------------------------------------------------------------------------


async def test_pre_hook_edits_text() -> None:
    model = ScriptedModel()

    def redact(ctx: PreSummaryContext) -> None:
        ctx.text = ctx.text.replace("question", "[redacted]")

    await make(model, hooks=SummaryHooks(pre_summary=redact)).summarize("", rounds(1), session=SESSION)
    assert "[redacted] 0" in user_text(model.requests[0])


async def test_pre_hook_edits_events_and_previous_summary() -> None:
    model = ScriptedModel()

    async def edit(ctx: PreSummaryContext) -> None:
        ctx.events = ctx.events[:1]
        ctx.previous_summary = "edited prev"

    s = make(model, prompt="{previous_summary}|{conversation_text}", hooks=SummaryHooks(pre_summary=edit))
    result = await s.summarize("prev", rounds(1), session=SESSION)
    assert user_text(model.requests[0]).startswith("edited prev|user: question 0")
    assert "answer 0" not in user_text(model.requests[0])
    assert result.covered_events == 2


def _drop_all(ctx: PreSummaryContext) -> None:
    ctx.events = []


def _blank(ctx: PreSummaryContext) -> None:
    ctx.text = "  \n "


async def _async_drop_all(ctx: PreSummaryContext) -> None:
    ctx.events = []


@pytest.mark.parametrize("hook", [_drop_all, _blank, _async_drop_all])
@pytest.mark.parametrize("previous", ["", "P1 old summary"])
@pytest.mark.parametrize("forked", [False, True])
async def test_a_pre_hook_that_leaves_no_text_summarizes_nothing(hook: object, previous: str, forked: bool) -> None:
    model = ScriptedModel()
    reports: list[BaseException | None] = []
    hooks = SummaryHooks(pre_summary=hook, report=lambda r, e: reports.append(e))  # type: ignore[arg-type]
    events = rounds(2)
    parent = {"messages": [{"role": "system", "content": previous}, *request_messages(events)]}
    s = make(model, prompt="{previous_summary}|{conversation_text}", hooks=hooks)
    with pytest.raises(SummarySkipped, match=r"no conversation text extracted for session s1 \(events=4\)"):
        await s.summarize(previous, events, session=SESSION, model_request=parent if forked else None)
    assert model.requests == []
    assert isinstance(reports[0], SummarySkipped)


async def test_a_pre_hook_edit_applies_to_the_standalone_retry_of_a_fork() -> None:
    model = ScriptedModel(ContextLengthError("maximum context length"), "S")

    def redact(ctx: PreSummaryContext) -> None:
        ctx.text = ctx.text.replace("question", "[redacted]")

    events = rounds(1)
    s = make(model, hooks=SummaryHooks(pre_summary=redact))
    await s.summarize("", events, session=SESSION, model_request={"messages": request_messages(events)})
    assert model.requests[0].messages[0]["content"].startswith("question 0")  # the fork: not redactable
    retry = user_text(model.requests[1])
    assert "[redacted] 0" in retry and "question 0" not in retry


async def test_a_post_hook_that_empties_the_summary_keeps_the_models_text() -> None:
    def blank(ctx: PostSummaryContext) -> None:
        ctx.summary = "   "

    result = await make(ScriptedModel("M1 kept"), hooks=SummaryHooks(post_summary=blank)).summarize("", rounds(1))
    assert result.text == "M1 kept"


@pytest.mark.parametrize("abort", [False, True])
async def test_pre_hook_errors(abort: bool) -> None:
    model = ScriptedModel()

    def boom(ctx: PreSummaryContext) -> None:
        ctx.text = "half edited"
        raise ValueError("nope")

    s = make(model, hooks=SummaryHooks(pre_summary=boom, abort_on_error=abort))
    if abort:
        with pytest.raises(PermanentError, match="pre-summary hook failed"):
            await s.summarize("", rounds(1))
        assert model.requests == []
    else:
        await s.summarize("", rounds(1))
        assert "question 0" in user_text(model.requests[0])


async def test_pre_hook_that_blows_up_the_source_is_a_clear_error() -> None:
    def inflate(ctx: PreSummaryContext) -> None:
        ctx.text = "y " * 5000

    s = make(ScriptedModel(), hooks=SummaryHooks(pre_summary=inflate))
    with pytest.raises(PermanentError, match="after the pre-summary hook"):
        await s.summarize("", rounds(1))


async def test_post_hook_edits_and_errors() -> None:
    seen: list[PostSummaryContext] = []

    def shout(ctx: PostSummaryContext) -> None:
        seen.append(ctx)
        ctx.summary = ctx.summary.upper()

    result = await make(ScriptedModel("quiet"), hooks=SummaryHooks(post_summary=shout)).summarize("", rounds(1))
    assert result.text == "QUIET" and seen[0].last_event_id == "e1"

    def fail(ctx: PostSummaryContext) -> None:
        ctx.summary = "garbage"
        raise RuntimeError("x")

    kept = await make(ScriptedModel("orig"), hooks=SummaryHooks(post_summary=fail)).summarize("", rounds(1))
    assert kept.text == "orig"
    with pytest.raises(PermanentError, match="post-summary hook failed"):
        await make(ScriptedModel(), hooks=SummaryHooks(post_summary=fail, abort_on_error=True)).summarize("", rounds(1))


async def test_before_model_callback_edits_the_final_request() -> None:
    model = ScriptedModel()

    def tag(args: BeforeModelArgs) -> None:
        args.request.messages.insert(0, {"role": "system", "content": "tenant=acme"})

    await make(model, hooks=SummaryHooks(before_model=(tag,))).summarize("", rounds(1))
    assert model.requests[0].messages[0] == {"role": "system", "content": "tenant=acme"}


async def test_before_model_custom_response_skips_the_model() -> None:
    model = ScriptedModel()
    hooks = SummaryHooks(before_model=(lambda args: BeforeModelResult("cached summary"),))
    result = await make(model, hooks=hooks).summarize("", rounds(1))
    assert result.text == "cached summary"
    assert model.requests == []
    (call,) = result.report.calls
    assert call.mode == "custom_response" and call.estimated_prompt_tokens == 0


async def test_before_model_callback_that_oversizes_the_request_fails() -> None:
    def bloat(args: BeforeModelArgs) -> None:
        args.request.messages.append({"role": "user", "content": "b " * 5000})

    model = ScriptedModel()
    with pytest.raises(PermanentError, match="no longer fits after before-model callbacks"):
        await make(model, hooks=SummaryHooks(before_model=(bloat,))).summarize("", rounds(1))
    assert model.requests == []


async def test_after_model_callback_may_replace_the_response() -> None:
    async def override(args: AfterModelArgs) -> ModelResponse:
        return ModelResponse(text="overridden", model=args.response.model)

    result = await make(ScriptedModel("raw"), hooks=SummaryHooks(after_model=(override,))).summarize("", rounds(1))
    assert result.text == "overridden"


async def test_report_hook_failure_is_swallowed() -> None:
    def broken(report: SummaryReport, error: BaseException | None) -> None:
        raise RuntimeError("hook bug")

    result = await make(ScriptedModel("S"), hooks=SummaryHooks(report=broken)).summarize("", rounds(1))
    assert result.text == "S"


LOOKUP = event(2, "agent", None, tool_calls=[("c1", "lookup", "{}")])


async def test_fork_is_tried_before_standalone_prefixing() -> None:
    # The caller's request fits only with a big tool result left out: one from before the
    # boundary (the previous summary holds it), so the fork still holds every event of the pass.
    model = EchoModel(context_window=300)
    summarized = [event(1, "user", "look it up"), LOOKUP, event(3, "agent", "w " * 400, tool_call_id="c1")]
    events = [event(5, "user", "M5 继续查"), event(6, "agent", "M6 好的")]
    before = [{"role": "system", "content": "rules\n\nSummary:\nP1 旧的事实"}, *request_messages(summarized)]
    seen: list[str] = []

    def note(ctx: PreSummaryContext) -> None:
        seen.append(ctx.text)
        ctx.text = "ignored in fork mode"

    s = make(model, hooks=SummaryHooks(pre_summary=note))
    parent = {"messages": [*before, *request_messages(events)]}
    result = await s.summarize("P1 旧的事实", events, model_request=parent, session=SESSION)
    assert result.fork_used and result.covered_events == 2
    assert model.requests[0].messages[3]["content"].startswith("[Tool result left out")
    assert set(markers(result.text)) == {"P1", "M5", "M6"}
    assert seen and seen[0].startswith("user: M5")


async def test_a_fork_that_fits_only_by_leaving_out_a_payload_of_the_pass_is_declined() -> None:
    # Fitting the caller's request would replace the pass's own tool result by a marker that names
    # no event: the summary would cover e3 without having seen it. The standalone request cuts it
    # head + tail instead, names it for session_load and reports the cut.
    model = EchoModel(context_window=300)
    result_text = "M3 查询结果：" + "数据行" * 300 + " 结束"
    events = [
        event(1, "user", "M1 查一下报告"),
        LOOKUP,
        event(3, "agent", result_text, tool_call_id="c1", name="lookup"),
        event(4, "agent", "M4 找到了"),
    ]
    result = await make(model).summarize("", events, model_request={"messages": request_messages(events)})
    assert not result.fork_used
    call = result.report.calls[0]
    assert call.mode == "standalone"
    assert call.fork_declined == (
        "the caller's request fits the input budget (210 tokens) only with payloads left out "
        "of 1 of the pass's 4 events (e3)"
    )
    assert [c.event_id for c in result.report.truncated_payloads] == ["e3"]
    assert 'session_load(event_id="e3")' in user_text(model.requests[0])
    assert set(markers(result.text)) == {"M1", "M3", "M4"}
    assert result.last_event is not None and result.last_event.event_id == "e4"


async def test_a_fork_whose_tool_result_the_caller_elided_is_not_used() -> None:
    events = [
        event(1, "user", "M1 查一下报告"),
        LOOKUP,
        event(3, "agent", "M3 十二行结果", tool_call_id="c1", name="lookup"),
        event(4, "agent", "M4 找到了"),
    ]
    tailored = request_messages(events)
    tailored[2]["content"] = "[结果已省略]"  # the id is still there; the content is not
    result = await make(EchoModel()).summarize("", events, model_request={"messages": tailored})
    assert not result.fork_used
    assert result.report.calls[0].fork_declined == "the caller's request lacks 1 of the pass's 4 events (e3)"
    assert set(markers(result.text)) == {"M1", "M3", "M4"}


async def test_a_fork_that_holds_only_part_of_the_delta_is_not_used() -> None:
    # assemble tailored the caller's request down to the last 3 of 12 messages.
    events = [event(i, "user" if i % 2 == 0 else "agent", f"M{i} 第{i}步") for i in range(12)]
    tailored = {"messages": [{"role": "system", "content": "rules"}, *request_messages(events[-3:])]}
    model = EchoModel()
    result = await make(model).summarize("", events, model_request=tailored, session=SESSION)
    assert not result.fork_used
    assert set(markers(result.text)) == {f"M{i}" for i in range(12)}
    call = result.report.calls[0]
    assert call.mode == "standalone"
    assert call.fork_declined is not None and "lacks 9 of the pass's 12 events (e0, e1, e2, e3, e4, ...)" in (
        call.fork_declined
    )
    assert result.last_event is not None and result.last_event.event_id == "e11"


async def test_a_fork_without_the_previous_summary_is_not_used() -> None:
    events = rounds(1)
    model = EchoModel()
    parent = {"messages": request_messages(events)}
    result = await make(model).summarize("P1 P2 old facts", events, model_request=parent, session=SESSION)
    assert not result.fork_used
    assert result.report.calls[0].fork_declined == "the caller's request lacks the previous summary"
    assert {"P1", "P2"} <= set(markers(result.text))
    with_summary = {
        "messages": [{"role": "system", "content": "rules\n\nSummary:\nP1  P2 old facts"}, *parent["messages"]]
    }
    forked = await make(EchoModel()).summarize("P1 P2 old facts", events, model_request=with_summary)
    assert forked.fork_used and forked.report.calls[0].fork_declined is None


async def test_fork_containment_reads_parts_cjk_and_tool_ids() -> None:
    events = [
        event(1, "user", "请总结以下对话：关键决策"),
        event(2, "agent", None, tool_calls=[("c1", "search", '{"q": "東京"}')]),
        event(3, "agent", "結果：晴れ", tool_call_id="c1", name="search"),
        event(4, "agent", "กรุงเทพ อากาศดี"),
        event(5, "agent", "ok"),
        event(6, "agent", "ok"),
    ]
    messages = request_messages(events)
    # List-of-parts content, decomposed Unicode and other whitespace are the same message.
    messages[0]["content"] = [{"type": "text", "text": "请总结以下对话："}, {"type": "text", "text": "关键决策"}]
    messages[3]["content"] = "กรุงเทพ   อากาศดี"
    assert fork_misses(messages, events, "", DEFAULT_FORMATTER) is None
    # A result or arguments the caller replaced by a marker are not held, whatever ids remain.
    elided = [*messages[:2], {**messages[2], "content": "[Tool result left out]"}, *messages[3:]]
    missing = fork_misses(elided, events, "", DEFAULT_FORMATTER)
    assert missing is not None and "(e3)" in missing
    call = messages[1]["tool_calls"][0]
    omitted = {**messages[1], "tool_calls": [{**call, "function": {"name": "search", "arguments": "{}"}}]}
    missing = fork_misses([messages[0], omitted, *messages[2:]], events, "", DEFAULT_FORMATTER)
    assert missing is not None and "(e2)" in missing
    respaced = {**messages[1], "tool_calls": [{**call, "function": {"name": "search", "arguments": '{"q":"東京"}'}}]}
    assert fork_misses([messages[0], respaced, *messages[2:]], events, "", DEFAULT_FORMATTER) is None
    # Two events "ok" need two messages holding "ok".
    missing = fork_misses(messages[:5], events, "", DEFAULT_FORMATTER)
    assert missing is not None and "(e6)" in missing
    no_call = [m for m in messages if m.get("tool_call_id") != "c1"]
    missing = fork_misses(no_call, events, "", DEFAULT_FORMATTER)
    assert missing is not None and "(e3)" in missing
    decomposed = [{**messages[0], "content": "Cafe\u0301"}]
    assert fork_misses(decomposed, [event(1, "user", "Café")], "", DEFAULT_FORMATTER) is None


@pytest.mark.parametrize(("short", "longer"), [("好", "我们去里斯本好吗"), ("yes", "Book the 9am flight? yes")])
async def test_a_short_message_the_callers_request_dropped_is_not_held_by_a_longer_one(short: str, longer: str) -> None:
    events = [event(1, "user", longer), event(2, "agent", short), event(3, "user", "那就订票吧 then book it")]
    messages = request_messages(events)
    assert fork_misses(messages, events, "", DEFAULT_FORMATTER) is None
    dropped = [messages[0], messages[2]]  # the caller's request lost the short answer
    missing = fork_misses(dropped, events, "", DEFAULT_FORMATTER)
    assert missing is not None and "(e2)" in missing
    # Through the summarizer: the fork is declined and the standalone request holds the short answer.
    model = ScriptedModel()
    result = await make(model).summarize("", events, model_request={"messages": dropped}, session=SESSION)
    assert not result.fork_used and "(e2)" in (result.report.calls[0].fork_declined or "")
    assert f"agent: {short}\n" in user_text(model.requests[0])
    # One message holds one event: the short answer shown once does not stand for two.
    twice = [*events[:2], event(4, "agent", short)]
    assert "(e4)" in (fork_misses(request_messages(twice)[:2], twice, "", DEFAULT_FORMATTER) or "")


def test_a_fork_still_holds_the_turns_the_request_put_a_summary_or_notes_in_front_of() -> None:
    events = [event(1, "user", "好"), event(2, "agent", "ok"), event(3, "user", "yes")]
    messages = request_messages(events)
    messages[0]["content"] = "Background from earlier:\n\n<summary_of_previous_interactions>\nP1\n</x>\n\n好"
    messages[2]["content"] = "[distill: left out to keep every tool call answered: event_id=e0]\n\nyes"
    assert fork_misses(messages, events, "", DEFAULT_FORMATTER) is None
    # A text that is also the start of another one: each still finds its own message, in any order.
    pair = [event(1, "agent", "ok"), event(2, "agent", "ok fine")]
    assert fork_misses(request_messages(pair)[::-1], pair, "", DEFAULT_FORMATTER) is None


@pytest.mark.parametrize("prompt", ["P {previous_summary}\nC {conversation_text}", "C {conversation_text}"])
def test_previous_summary_is_never_dropped_a_shorter_prefix_or_an_error_instead(prompt: str) -> None:
    builder = RequestBuilder(build_prompts(prompt), COUNTER)
    events = rounds(3)
    previous = "p" * 400

    def text(k: int) -> str:
        return DEFAULT_FORMATTER.conversation_text(events[:k])

    first = safe_prefix_ends(events, DEFAULT_FORMATTER)[0]
    # The whole delta fits alone, but not beside even the shortest cut of the previous summary.
    budget = max(builder.tokens(text(len(events)), ""), builder.min_tokens(text(first), previous))
    assert builder.min_tokens(text(len(events)), previous) > budget
    with pytest.raises(PreviousSummaryTooLargeError, match="refusing to drop the previous summary"):
        builder.bounded(text(len(events)), previous, budget)
    plan = plan_pass(events, previous, budget, builder, DEFAULT_FORMATTER)
    assert plan.partial_prefix and plan.truncated_previous and len(plan.events) < len(events)
    assert plan.request.source is not None and TRUNCATION_MARKER in plan.request.source.previous_summary
    assert count_request(plan.request, COUNTER) <= budget
    # Not even the smallest prefix fits beside it: a clear error, not a request without it.
    tight = builder.tokens(text(first), "")
    with pytest.raises(PreviousSummaryTooLargeError, match="smallest complete prefix") as info:
        plan_pass(events, previous, tight, builder, DEFAULT_FORMATTER)
    assert isinstance(info.value, SourceTooLargeError) and info.value.tokens > info.value.budget == tight


async def test_settings_choose_how_often_an_empty_answer_is_asked_again() -> None:
    from schemas.settings import Settings
    from streams.summarizer import build_summarizer

    model = ScriptedModel("", "unused")
    s = build_summarizer(Settings(summary={"empty_answer_retries": 0}), model=model, token_counter=COUNTER)
    with pytest.raises(EmptySummaryError):
        await s.summarize("", rounds(1), session=SESSION)
    assert len(model.requests) == 1


def hook_delta(n: int) -> list[SessionEvent]:
    """``n`` CJK turns, each with its marker, and a chit-chat turn (no marker) after every fifth."""
    out: list[SessionEvent] = []
    for i in range(n):
        out.append(event(len(out), "user" if i % 2 == 0 else "agent", f"M{i} " + f"第{i}轮的对话内容" * 7))
        if i % 5 == 4:
            out.append(event(len(out), "agent", "好的，闲聊一句"))
    return out


def rewrap(ctx: PreSummaryContext) -> None:
    ctx.text = "以下是对话：\n" + ctx.text + "\n（完）"


def drop_chat(ctx: PreSummaryContext) -> None:
    ctx.events = [e for e in ctx.events if "闲聊" not in (e.message.content or "")]


@pytest.mark.parametrize("hook", [None, lambda ctx: None, rewrap, drop_chat], ids=["none", "noop", "wrap", "edit"])
@pytest.mark.parametrize(("turns", "facts"), [(60, 30), (30, 110)], ids=["long-delta", "long-previous"])
async def test_a_pre_summary_hook_lets_the_half_budget_retry_take_a_shorter_prefix(
    hook: PreSummaryHook | None, turns: int, facts: int
) -> None:
    # At half the budget the whole delta does not fit beside the whole previous summary: the retry
    # takes a shorter prefix (the rest goes to the next pass), with a hook as without one, and
    # never cuts the previous summary nor fails.
    previous = "前情：" + " ".join(f"P{j} 第{j}条部署事实" for j in range(facts))
    events = hook_delta(turns)
    model = EchoModel(ContextLengthError("maximum context length exceeded"), context_window=2000)
    prompt = "{previous_summary}\n{conversation_text}"
    result = await make(model, prompt=prompt, hooks=SummaryHooks(pre_summary=hook)).summarize(
        previous, events, session=SESSION
    )
    assert [c.budget_tokens for c in result.report.calls][:2] == [1400, 700]
    assert result.report.partial_prefix and result.passes > 1
    assert not result.report.truncated_previous_summary
    assert set(markers(result.text)) == {f"P{j}" for j in range(facts)} | {f"M{i}" for i in range(turns)}
    assert result.covered_events == len(events) and result.caught_up
    retry = model.requests[1]
    assert retry.source is not None and retry.source.previous_summary == previous


def test_a_prefix_of_hooked_events_covers_the_original_events_up_to_its_last() -> None:
    original = [event(i, "user", f"M{i} 第{i}句") for i in range(6)]
    without_e1 = [e for e in original if e.event_id != "e1"]
    assert covered_prefix(without_e1[:2], without_e1, original) == original[:3]
    assert covered_prefix(without_e1, without_e1, original) == original
    added = [*original[:3], event(99, "agent", "钩子加的注释"), *original[3:]]
    assert covered_prefix(added[:4], added, original) is None  # ends on an event the delta does not have
    reordered = [original[0], original[2], original[1], *original[3:]]
    assert covered_prefix(reordered[:2], reordered, original) is None  # e1 left out, though before e2
