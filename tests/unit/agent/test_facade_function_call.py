"""A reply of the deprecated functions API (``function_call``, ``content`` null) was recorded as an empty
assistant turn, with no error: the call was in no request and no summary. It is the reply's one tool call,
id derived from its event; the ``role: "function"`` result after it (naming the function, not the call) is
that call's tool result."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from openai.types.chat import ChatCompletionMessage
from openai.types.chat.chat_completion_message import FunctionCall

from schemas import Message, SessionEvent, SessionKey
from schemas.settings import Settings
from streams.adapters.backend import SessionBackend
from streams.agent.facade import DistillAgent
from streams.agent.messages import InvalidMessageError, to_message
from tests.unit.agent.test_facade_clock import LogAndCut
from tests.unit.context.sessions import summary_at

KEY = SessionKey("app", "u1", "s1")


def _reply() -> ChatCompletionMessage:
    call = FunctionCall(name="get_weather", arguments='{"city": "上海 标记1"}')
    return ChatCompletionMessage(role="assistant", content=None, function_call=call)


def _agent() -> tuple[DistillAgent, LogAndCut]:
    first = SessionEvent(app_name=KEY.app_name, user_id=KEY.user_id, session_id=KEY.session_id, event_id="e0",
                         timestamp=datetime.now(UTC) - timedelta(seconds=5), author="user",
                         message=Message(role="user", content="你好"), request_id="r0", invocation_id="r0")  # fmt: skip
    log = LogAndCut([first], summary_at(first, "空"))
    backend = SessionBackend(Settings(), client=log, reader=log, context=log)  # type: ignore[arg-type]
    return DistillAgent(backend, app_name=KEY.app_name, user_id=KEY.user_id, session_id=KEY.session_id), log


def test_a_function_call_is_the_reply_s_one_tool_call() -> None:
    msg = to_message(_reply())
    assert msg.role == "assistant" and msg.content is None
    [call] = msg.tool_calls
    assert (call.function.name, call.function.arguments) == ("get_weather", '{"city": "上海 标记1"}')
    assert to_message(_reply()).tool_calls[0].id == call.id  # the same call, the same id
    assert to_message(_reply(), call_id="call-x").tool_calls[0].id == "call-x"


def test_a_function_result_naming_no_call_is_refused() -> None:
    with pytest.raises(InvalidMessageError, match="tool_call_id"):
        to_message({"role": "function", "name": "get_weather", "content": "小雨"})
    answered = to_message({"role": "function", "name": "get_weather", "content": "小雨"}, call_id="call-x")
    assert (answered.role, answered.tool_call_id, answered.name) == ("tool", "call-x", "get_weather")


async def test_a_recorded_function_call_and_its_function_result_pair() -> None:
    agent, log = _agent()
    await agent.user("上海天气如何？")
    replied = await agent.record(_reply())
    [call] = replied.message.tool_calls
    assert call.id == f"call-{replied.event_id}"
    answered = await agent.record({"role": "function", "name": "get_weather", "content": "小雨 标记2"})
    assert (answered.message.role, answered.message.tool_call_id) == ("tool", call.id)
    request = await agent.next_request("sys")
    function = {"name": "get_weather", "arguments": '{"city": "上海 标记1"}'}
    tool_call = {"id": call.id, "type": "function", "function": function}
    assert request.messages[-2:] == [
        {"role": "assistant", "content": None, "tool_calls": [tool_call]},
        {"role": "tool", "content": "小雨 标记2", "tool_call_id": call.id},
    ]  # fmt: skip
    # answered once: a second function result has no call to answer
    with pytest.raises(InvalidMessageError, match="no function_call"):
        await agent.record({"role": "function", "name": "get_weather", "content": "again"})
    assert len(log.log) == 4


async def test_run_tools_answers_a_recorded_function_call_under_its_id() -> None:
    agent, log = _agent()
    await agent.user("上海天气如何？")
    reply = _reply()
    replied = await agent.record(reply)
    [result] = await agent.run_tools(reply, {"get_weather": lambda city: f"{city}: 小雨"})
    assert result.tool_call_id == f"call-{replied.event_id}"
    assert result.content == "上海 标记1: 小雨"
    assert log.log[-1].message == result


async def test_a_restarted_facade_pairs_the_function_result_with_the_run_s_call() -> None:
    agent, _ = _agent()
    await agent.user("上海天气如何？")
    replied = await agent.record(_reply())
    again = DistillAgent(agent.backend, app_name=KEY.app_name, user_id=KEY.user_id, session_id=KEY.session_id)
    answered = await again.record({"role": "function", "name": "get_weather", "content": "小雨 标记2"})
    assert answered.message.tool_call_id == f"call-{replied.event_id}"
    assert answered.request_id == replied.request_id
