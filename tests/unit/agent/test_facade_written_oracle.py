"""Oracle for what the facade writes: every marker the model or a tool produced reaches the next request
and, once summarized, the summary — through a marker-echoing OpenAI-compatible server with faults injected.

It covers what the write path used to drop or refuse: a refusal (``refusal``, content null), a spoken
reply (``audio.transcript``), a legacy ``function_call`` and its ``role: "function"`` result, and a
tool result holding a lone surrogate (``run_tools`` raised and published none of the batch's results).
"""

from __future__ import annotations

import json

from openai.types.chat import ChatCompletionMessage
from openai.types.chat.chat_completion_message import FunctionCall
from pydantic import SecretStr

from schemas.settings import LLMSettings
from streams.errors import RetryableError
from streams.summarizer.openai_adapter import OpenAIChatModel
from streams.summarizer.summarizer import Summarizer
from tests.support.markers import MarkerBook, find_markers
from tests.support.openai_server import FaultMix, MarkerEcho, OpenAIServer
from tests.unit.agent.test_facade_function_call import KEY, _agent


async def test_every_marker_written_through_the_facade_reaches_the_request_and_the_summary() -> None:
    book = MarkerBook()
    agent, log = _agent()
    await agent.user(f"帮我查天气，顺便读一下目录 {book.mint('ask')}")
    await agent.record(
        ChatCompletionMessage(role="assistant", content=None, refusal=f"无法提供 {book.mint('refusal')}")
    )
    audio = {"id": "a1", "data": "", "expires_at": 0, "transcript": f"好的 {book.mint('audio')}"}
    await agent.record({"role": "assistant", "content": None, "audio": audio})
    call = FunctionCall(name="get_weather", arguments=json.dumps({"city": f"上海 {book.mint('legacy-call')}"}))
    await agent.record(ChatCompletionMessage(role="assistant", content=None, function_call=call))
    await agent.record({"role": "function", "name": "get_weather", "content": f"小雨 {book.mint('legacy-result')}"})
    listing = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    reply = {"role": "assistant", "content": None, "tool_calls": [listing]}
    await agent.record(reply)
    name = f"caf\udce9 {book.mint('lone-surrogate')}"  # os.listdir's name for the bytes b"caf\xe9"
    await agent.run_tools(reply, {"ls": lambda: name})
    every = {m for ms in book.by_event.values() for m in ms}

    request = await agent.next_request("你是助手。")
    assert every <= set(find_markers(json.dumps(request.messages, ensure_ascii=False))), "missing from the request"

    events = log.log[1:]  # after the boundary event
    faults = FaultMix(server_error=0.3, rate_limited=0.2, empty=0.2, slow=0.2, slow_s=(0.01, 0.05))
    with OpenAIServer(default=MarkerEcho(faults, seed=7)) as server:
        model = OpenAIChatModel(LLMSettings(base_url=server.base_url, api_key=SecretStr("k"), model="m",
                                            context_window=64_000, max_retries=0))  # fmt: skip
        summarizer = Summarizer(model)
        for _ in range(50):  # the worker retries a transient failure
            try:
                result = await summarizer.summarize("", events, session=KEY)
                break
            except RetryableError:
                continue
        else:
            raise AssertionError("the scripted model never answered")
    lost = every - set(find_markers(result.text))
    assert not lost, f"{sorted(book.by_marker[m] for m in lost)} are in neither the summary nor the request"


async def test_markers_of_tool_calls_whose_ids_restart_each_turn_reach_the_request_and_the_summary() -> None:
    """A framework numbering calls ``call_0`` afresh each turn, turn 1's tool slower than turn 2's: turn 2's
    result arrives first, turn 1's after it. Each result is shown with its own turn's call (before: one open
    call per id — turn 1's result replaced turn 2's, whose text then reached no request, and turn 1's call
    was left out)."""
    book = MarkerBook()
    agent, log = _agent()
    for turn, city in ((1, "巴黎"), (2, "罗马")):
        await agent.user(f"{city}天气？ {book.mint(f'ask-{turn}')}")
        arguments = json.dumps({"city": f"{city} {book.mint(f'args-{turn}')}"}, ensure_ascii=False)
        call = {"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
        await agent.record({"role": "assistant", "content": None, "tool_calls": [call]})
    await agent.record({"role": "tool", "tool_call_id": "call_0", "content": f"罗马晴 {book.mint('result-2')}"})
    await agent.record({"role": "tool", "tool_call_id": "call_0", "content": f"巴黎雨 {book.mint('result-1')}"})
    every = {m for ms in book.by_event.values() for m in ms}

    request = await agent.next_request("你是助手。")
    shown = json.dumps(request.messages, ensure_ascii=False)
    assert every <= set(find_markers(shown)), f"missing from the request: {sorted(every - set(find_markers(shown)))}"
    pairs = [(json.loads(m["tool_calls"][0]["function"]["arguments"])["city"], n["content"])
             for m, n in zip(request.messages, request.messages[1:], strict=False) if m.get("tool_calls")]  # fmt: skip
    assert [(city.split()[0], text.split()[0]) for city, text in pairs] == [("巴黎", "巴黎雨"), ("罗马", "罗马晴")]

    faults = FaultMix(server_error=0.3, rate_limited=0.2, empty=0.2, slow=0.2, slow_s=(0.01, 0.05))
    with OpenAIServer(default=MarkerEcho(faults, seed=11)) as server:
        model = OpenAIChatModel(LLMSettings(base_url=server.base_url, api_key=SecretStr("k"), model="m",
                                            context_window=64_000, max_retries=0))  # fmt: skip
        summarizer = Summarizer(model)
        for _ in range(50):  # the worker retries a transient failure
            try:
                result = await summarizer.summarize("", log.log[1:], session=KEY)
                break
            except RetryableError:
                continue
        else:
            raise AssertionError("the scripted model never answered")
    lost = every - set(find_markers(result.text))
    assert not lost, f"{sorted(book.by_marker[m] for m in lost)} are in neither the summary nor the request"
