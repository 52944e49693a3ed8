"""The LLM path through the real ``openai`` client against a real local HTTP server."""

import time
from collections.abc import Iterator

import pytest
from pydantic import SecretStr

from schemas.settings import LLMSettings
from streams.errors import PermanentError, RetryableError
from streams.summarizer.model import ContextLengthError, context_window_in
from streams.summarizer.openai_adapter import OpenAIChatModel
from streams.summarizer.request import ChatRequest, standalone_request
from streams.summarizer.summarizer import CutOffSummaryError, EmptySummaryError, Summarizer
from tests.support.openai_server import (
    OpenAIServer,
    Reply,
    answer,
    bad_request,
    context_length_exceeded,
    empty_answer,
    rate_limited,
    server_error,
    slow,
)

from .helpers import SESSION, request_messages, rounds


@pytest.fixture(scope="module")
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer() as srv:
        yield srv


@pytest.fixture
def fresh(server: OpenAIServer) -> OpenAIServer:
    server.requests.clear()
    assert server.pending() == 0
    return server


def model_for(server: OpenAIServer, **kw: object) -> OpenAIChatModel:
    settings = LLMSettings(
        base_url=server.base_url,
        api_key=SecretStr("test-key"),
        model="summary-model",
        context_window=4000,
        **kw,  # type: ignore[arg-type]
    )
    return OpenAIChatModel(settings)


async def test_normal_answer_with_usage(fresh: OpenAIServer) -> None:
    fresh.script(answer("  The user wants X.  ", prompt_tokens=321, cached_tokens=256, completion_tokens=7))
    model = model_for(fresh, temperature=0.0, max_output_tokens=300)
    summarizer = Summarizer(model, max_summary_words=80)
    result = await summarizer.summarize("", rounds(2), session=SESSION)
    assert result.text == "The user wants X."
    (call,) = result.report.calls
    assert (call.provider_prompt_tokens, call.provider_cached_tokens, call.completion_tokens) == (321, 256, 7)
    body = fresh.requests[0].body
    assert body["model"] == "summary-model"
    assert body["stream"] is False
    assert body["temperature"] == 0.0 and body["max_tokens"] == 300
    assert "question 1" in body["messages"][-1]["content"]
    assert fresh.requests[0].headers["Authorization"] == "Bearer test-key"
    await model.aclose()


async def test_context_length_error_is_recognised_and_retried_at_half_budget(fresh: OpenAIServer) -> None:
    fresh.script(context_length_exceeded(), answer("fits now"))
    model = model_for(fresh)
    result = await Summarizer(model).summarize("", rounds(2), session=SESSION)
    assert result.text == "fits now"
    assert len(fresh.requests) == 2
    first, second = result.report.calls
    assert first.outcome == "retried" and "ContextLengthError" in (first.error or "")
    assert second.budget_tokens == first.budget_tokens // 2  # type: ignore[operator]
    await model.aclose()


async def test_context_length_error_translation(fresh: OpenAIServer) -> None:
    fresh.script(context_length_exceeded())
    model = model_for(fresh)
    with pytest.raises(ContextLengthError):
        await model.complete(standalone_request("hi"))
    await model.aclose()


async def test_a_context_refusal_carries_the_window_the_provider_named(fresh: OpenAIServer) -> None:
    vllm = Reply(
        status=400,
        body={
            "object": "error",
            "type": "BadRequestError",
            "code": 400,
            "message": (
                "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens "
                "(4000 in the messages, 1000 in the completion). Please reduce the length of the messages."
            ),
        },
    )
    fresh.script(context_length_exceeded(tokens=9000, limit=8192), vllm, context_length_exceeded(limit=0))
    model = model_for(fresh, max_retries=0)
    windows = []
    for _ in range(3):
        with pytest.raises(ContextLengthError) as info:
            await model.complete(standalone_request("hi"))
        windows.append(info.value.context_window)
    assert windows == [8192, 4096, None]
    await model.aclose()


@pytest.mark.parametrize(
    ("text", "window"),
    [
        ("This model's maximum context length is 128,000 tokens. However, your messages resulted in 9 tokens.", 128000),
        ("The decoder prompt (length 5000) is longer than the maximum model length of 4096. Make sure that", 4096),
        ("Input prompt (5000 tokens) is too long and exceeds limit of 2048", 2048),
        ("request (5000 tokens) exceeds the available context size (4096 tokens), try increasing it", 4096),
        ("prompt is too long: 210000 tokens > 200000 maximum", 200000),
        ("context_length_exceeded", None),
        ("上下文长度超出限制", None),
    ],
)
def test_the_window_is_read_from_the_common_refusal_texts(text: str, window: int | None) -> None:
    assert context_window_in(text) == window


async def test_empty_answer_is_retried_once_then_fails(fresh: OpenAIServer) -> None:
    fresh.script(empty_answer(), empty_answer())
    model = model_for(fresh)
    with pytest.raises(EmptySummaryError, match="generated empty summary"):
        await Summarizer(model).summarize("", rounds(1), session=SESSION)
    assert len(fresh.requests) == 2
    # Asked again with the same request: an empty answer is not a budget problem.
    assert fresh.requests[1].body["messages"] == fresh.requests[0].body["messages"]
    await model.aclose()


def cut_off(text: str, reason: str = "length") -> Reply:
    choice = {"index": 0, "finish_reason": reason, "message": {"role": "assistant", "content": text}}
    return Reply(body={"model": "summary-model", "choices": [choice], "usage": {"completion_tokens": 300}})


async def test_an_answer_cut_at_the_output_limit_is_read_as_cut_off_and_never_stored(fresh: OpenAIServer) -> None:
    previous = "前情：P1 P2 P3 P4 P5"
    fresh.script(cut_off("前情：P1 P2 P3 然后用户问了新的"), answer("前情：P1 P2 P3 P4 P5；新的一轮 M1"))
    model = model_for(fresh, max_output_tokens=300)
    result = await Summarizer(model).summarize(previous, rounds(1), session=SESSION)
    assert result.text == "前情：P1 P2 P3 P4 P5；新的一轮 M1"
    assert fresh.requests[1].body["messages"] == fresh.requests[0].body["messages"]
    first, second = result.report.calls
    assert (first.outcome, first.error, first.completion_tokens) == (
        "retried",
        "answer cut off (finish_reason=length)",
        300,
    )
    assert second.outcome == "ok"
    fresh.script(cut_off("前情：P1", "content_filter"), cut_off("前情：P1 P2"))
    with pytest.raises(CutOffSummaryError):
        await Summarizer(model).summarize(previous, rounds(1), session=SESSION)
    await model.aclose()


async def test_rate_limit_honours_retry_after(fresh: OpenAIServer) -> None:
    fresh.script(rate_limited(retry_after=0.4), answer("after the wait"))
    model = model_for(fresh, max_retries=2)
    started = time.monotonic()
    response = await model.complete(standalone_request("hi"))
    assert response.text == "after the wait"
    gap = fresh.requests[1].at - fresh.requests[0].at
    assert gap >= 0.38, gap
    assert time.monotonic() - started < 5
    await model.aclose()


async def test_rate_limit_exhausted_is_retryable_with_retry_after(fresh: OpenAIServer) -> None:
    fresh.script(rate_limited(0.05), rate_limited(0.05))
    model = model_for(fresh, max_retries=1)
    with pytest.raises(RetryableError) as info:
        await model.complete(standalone_request("hi"))
    assert info.value.retry_after == pytest.approx(0.05)
    assert len(fresh.requests) == 2
    await model.aclose()


async def test_server_error_is_retried_by_the_client(fresh: OpenAIServer) -> None:
    fresh.script(server_error(500), answer("recovered"))
    model = model_for(fresh, max_retries=2)
    assert (await model.complete(standalone_request("hi"))).text == "recovered"
    assert len(fresh.requests) == 2
    await model.aclose()


async def test_server_error_exhausted_is_retryable(fresh: OpenAIServer) -> None:
    fresh.script(server_error(502))
    model = model_for(fresh, max_retries=0)
    with pytest.raises(RetryableError, match="HTTP 502"):
        await model.complete(standalone_request("hi"))
    await model.aclose()


async def test_slow_answer_past_the_timeout_is_retryable(fresh: OpenAIServer) -> None:
    fresh.script(slow(2.0), slow(2.0))
    model = model_for(fresh, timeout_s=0.3, max_retries=1)
    started = time.monotonic()
    with pytest.raises(RetryableError, match="timed out"):
        await model.complete(standalone_request("hi"))
    assert time.monotonic() - started < 2.5
    assert len(fresh.requests) == 2
    await model.aclose()


async def test_other_client_errors_are_permanent_and_not_retried(fresh: OpenAIServer) -> None:
    fresh.script(bad_request())
    model = model_for(fresh, max_retries=3)
    with pytest.raises(PermanentError, match="HTTP 400") as info:
        await model.complete(standalone_request("hi"))
    assert not isinstance(info.value, ContextLengthError)
    assert len(fresh.requests) == 1
    await model.aclose()


async def test_forked_request_keeps_tools_and_extra_params(fresh: OpenAIServer) -> None:
    parent = {
        "messages": request_messages(rounds(1)),
        "tools": [{"type": "function", "function": {"name": "t", "parameters": {"type": "object"}}}],
        "top_p": 0.5,
        "vendor_option": {"x": 1},
        "response_format": {"type": "json_object"},
    }
    model = model_for(fresh)
    result = await Summarizer(model).summarize("", rounds(1), model_request=parent, session=SESSION)
    body = fresh.requests[0].body
    assert result.fork_used
    assert body["tools"] == parent["tools"]
    assert body["top_p"] == 0.5 and body["vendor_option"] == {"x": 1}
    assert "response_format" not in body
    assert body["messages"][:2] == parent["messages"]
    await model.aclose()


async def test_messages_reach_the_server_as_built_without_the_clients_transform(
    fresh: OpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The request's messages go out byte for byte (CJK, list-of-parts content, tool calls), and the
    client's request transform never walks them (it costs ~1 ms per call and changes nothing)."""
    from openai.resources.chat.completions import completions as resource

    walked: list[int] = []
    transform = resource.async_maybe_transform

    async def counting(data: object, *args: object, **kwargs: object) -> object:
        if isinstance(data, dict):
            walked.append(len(data.get("messages") or ()))
        return await transform(data, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(resource, "async_maybe_transform", counting)
    messages = [
        {"role": "system", "content": "总结对话。"},
        {"role": "user", "content": [{"type": "text", "text": "第一部分 M1"}, {"type": "text", "text": "part two M2"}]},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"q\": \"查询\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "结果 M3"},
    ]  # fmt: skip
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
    request = ChatRequest(messages=messages, tools=tools, params={"stream": False})
    fresh.script(answer("ok"))
    model = model_for(fresh, temperature=0.5)
    response = await model.complete(request)
    assert response.text == "ok"
    body = fresh.requests[0].body
    assert body["messages"] == messages and body["tools"] == tools
    assert body["model"] == "summary-model" and body["temperature"] == 0.5 and body["stream"] is False
    assert walked and max(walked) == 0, walked
    await model.aclose()


@pytest.mark.parametrize(
    ("body", "text", "usage"),
    [
        ({}, "", (None, None, None)),
        ({"choices": []}, "", (None, None, None)),
        ({"choices": [{"message": {"role": "assistant", "content": None}}]}, "", (None, None, None)),
        ({"choices": [{"message": {"content": "摘要：用户要 X"}}], "usage": {"prompt_tokens": 12}}, "摘要：用户要 X",
         (12, None, None)),
        ({"choices": [{"message": {"content": "ok"}}],
          "usage": {"prompt_tokens": 9, "completion_tokens": 2, "prompt_tokens_details": None}}, "ok", (9, None, 2)),
        ({"choices": [{"message": {"content": ["not", "text"]}}], "usage": {"prompt_tokens": True}}, "",
         (None, None, None)),
        ({"choices": "nope", "usage": []}, "", (None, None, None)),
    ],
)  # fmt: skip
async def test_odd_completion_bodies_read_as_empty_or_unreported(
    fresh: OpenAIServer, body: dict[str, object], text: str, usage: tuple[int | None, ...]
) -> None:
    fresh.script(Reply(body=body))
    model = model_for(fresh)
    response = await model.complete(standalone_request("q"))
    assert response.text == text
    assert (response.usage.prompt_tokens, response.usage.cached_tokens, response.usage.completion_tokens) == usage
    assert response.model == "summary-model"
    await model.aclose()


@pytest.mark.parametrize("body", [b"<html>not an API</html>", b"[1, 2]", b"\xff\xfe"])
def test_a_body_that_is_no_completion_is_a_permanent_error(body: bytes) -> None:
    from streams.summarizer.completion_body import completion_response

    with pytest.raises(PermanentError, match="LLM endpoint answered"):
        completion_response(body, "m")
