import asyncio

import pytest

from schemas import SummaryBoundary, SummaryReport, TriggerReport
from streams.errors import PermanentError, RetryableError
from streams.rules.boundaries import BOUNDARY_FORMAT_VERSION
from streams.rules.tokens import SimpleTokenCounter
from streams.summarizer.budget import TRUNCATION_MARKER, safe_prefix_ends
from streams.summarizer.conversation import DEFAULT_FORMATTER
from streams.summarizer.hooks import (
    AfterModelArgs,
    BeforeModelArgs,
    BeforeModelResult,
    PostSummaryContext,
    PreSummaryContext,
    SummaryHooks,
)
from streams.summarizer.model import ContextLengthError, ModelResponse, ModelUsage
from streams.summarizer.plan import PreviousSummaryTooLargeError, RequestBuilder, SourceTooLargeError, plan_pass
from streams.summarizer.prompts import SOURCE_BOUNDARY, build_prompts
from streams.summarizer.request import count_request
from streams.summarizer.selection import skip_last
from streams.summarizer.summarizer import Summarizer, SummarySkipped

from .helpers import SESSION, ScriptedModel, event, rounds, user_text

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


@pytest.mark.parametrize("first", ["", "   ", ContextLengthError("maximum context length exceeded")])
async def test_one_retry_at_half_budget(first: object) -> None:
    model = ScriptedModel(first, "good", context_window=1000)  # type: ignore[arg-type]
    result = await make(model).summarize("", rounds(2), session=SESSION)
    assert result.text == "good"
    assert len(model.requests) == 2
    first_call, second_call = result.report.calls
    assert first_call.outcome == "retried" and first_call.budget_tokens == 700
    assert second_call.outcome == "ok" and second_call.budget_tokens == 350


async def test_retry_may_shrink_to_a_smaller_prefix() -> None:
    model = ScriptedModel(ContextLengthError("too many tokens"), "S", "T", context_window=200)
    result = await make(model).summarize("", rounds(4), session=SESSION)
    assert count_request(model.requests[1], COUNTER) <= 70
    assert result.caught_up


async def test_empty_twice_is_an_error_and_nothing_is_returned() -> None:
    model = ScriptedModel("", "")
    with pytest.raises(PermanentError, match=r"generated empty summary \(input_chars="):
        await make(model).summarize("", rounds(1), session=SESSION)
    assert len(model.requests) == 2


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
    model = ScriptedModel("First fact. Second fact is longer. Third.")
    result = await make(model, max_summary_length=30).summarize("", rounds(1))
    assert result.text == "First fact."


# Cache-safe forking ---------------------------------------------------------------------------

PARENT = {
    "messages": [
        {"role": "system", "content": "agent rules"},
        {"role": "user", "content": "question 0"},
        {"role": "assistant", "content": "answer 0"},
    ],
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
    model = ScriptedModel("", "S")
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


async def test_fork_is_tried_before_standalone_prefixing() -> None:
    # The standalone source would not fit, but the caller's (already compact) request does.
    model = ScriptedModel(context_window=300)
    events = [event(1, "user", "w " * 400), event(2, "agent", "ok")]
    compact = {"messages": [{"role": "user", "content": "compacted view"}, {"role": "assistant", "content": "ok"}]}
    seen: list[str] = []

    def note(ctx: PreSummaryContext) -> None:
        seen.append(ctx.text)
        ctx.text = "ignored in fork mode"

    s = make(model, hooks=SummaryHooks(pre_summary=note))
    result = await s.summarize("", events, model_request=compact, session=SESSION)
    assert result.fork_used and result.covered_events == 2
    assert model.requests[0].messages[0]["content"] == "compacted view"
    assert seen and seen[0].startswith("user: w")


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
