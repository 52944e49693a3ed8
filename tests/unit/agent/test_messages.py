"""What a runtime hands the facade (the openai client's objects, dicts, Messages) as distill's records."""

from __future__ import annotations

from typing import Any

import pytest
from openai.types import CompletionUsage
from openai.types.chat import ChatCompletionMessage

from schemas import Message
from streams.agent.messages import InvalidMessageError, to_message, to_usage


def test_the_openai_clients_reply_object() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "里斯本"}'}}
    reply = ChatCompletionMessage.model_validate(
        {"role": "assistant", "content": None, "refusal": None, "reasoning_content": "先查天气", "tool_calls": [call]}
    )
    msg = to_message(reply)
    assert msg.role == "assistant" and msg.content is None and msg.reasoning_content == "先查天气"
    assert [(c.id, c.function.name, c.function.arguments) for c in msg.tool_calls] == [
        ("c1", "get_weather", '{"city": "里斯本"}')
    ]
    assert not msg.model_extra  # refusal, annotations ... are not part of the session


def test_dicts_as_sdks_dump_them() -> None:
    parts = [{"type": "text", "text": "晴"}, {"type": "text", "text": " 24°C"}]
    msg = to_message({"role": "tool", "tool_call_id": "c1", "content": parts})
    assert msg.content == "晴 24°C" and msg.tool_call_id == "c1"
    assert to_message({"role": "assistant", "content": "ok", "tool_calls": None}).tool_calls == ()
    same = Message(role="user", content="hi")
    assert to_message(same) is same


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ({"role": "robot", "content": "x"}, "role"),
        ({"content": "no role"}, "role"),
        ({"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f"}}]}, "tool_calls.0.id"),
        (42, "got int"),
    ],
)
def test_what_is_not_a_message_is_refused_naming_why(value: Any, says: str) -> None:
    with pytest.raises(InvalidMessageError, match=says.replace(".", r"\.")):
        to_message(value)


def test_usage() -> None:
    usage = to_usage(CompletionUsage(prompt_tokens=10, completion_tokens=2, total_tokens=12))
    assert usage is not None and (usage.prompt_tokens, usage.total_tokens) == (10, 12)
    assert to_usage(None) is None
    with pytest.raises(InvalidMessageError, match="prompt_tokens"):
        to_usage({"prompt_tokens": "many"})


def test_what_the_model_answered_outside_content_is_its_text() -> None:
    """A refusal or a spoken reply comes with ``content`` null: the session keeps what the user was told."""
    refused = ChatCompletionMessage.model_validate(
        {"role": "assistant", "content": None, "refusal": "我不能帮你做这件事 🙅"}
    )
    assert to_message(refused).content == "我不能帮你做这件事 🙅"
    audio = {"id": "audio_1", "data": "UklGR...", "expires_at": 1, "transcript": "明天里斯本晴。"}
    spoken = {"role": "assistant", "content": None, "audio": audio}
    assert to_message(spoken).content == "明天里斯本晴。"
    both = {"role": "assistant", "content": "Partly:", "refusal": "the rest I cannot answer."}
    assert to_message(both).content == "Partly:\nthe rest I cannot answer."
    parts = [{"type": "text", "text": "好的"}, {"type": "refusal", "refusal": "但这部分不行"}]
    assert to_message({"role": "assistant", "content": parts}).content == "好的但这部分不行"
    assert to_message({"role": "assistant", "content": "ok", "refusal": None}).content == "ok"
