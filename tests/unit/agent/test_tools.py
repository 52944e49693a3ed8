"""The runtime's own tools: results as tool messages, every failure answered to the model, never raised."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from schemas import FunctionCall, ToolCall
from streams.agent.tools import run_local_tool


def _call(name: str, arguments: str) -> ToolCall:
    return ToolCall(id="c1", function=FunctionCall(name=name, arguments=arguments))


def weather(city: str) -> str:
    return f"{city}: 晴"


async def forecast(city: str, days: int = 2) -> dict[str, Any]:
    await asyncio.sleep(0)
    return {"city": city, "days": ["晴", "雨"][:days]}


def broken(city: str) -> str:
    raise RuntimeError(f"upstream down for {city}")


TOOLS = {"weather": weather, "forecast": forecast, "broken": broken}


async def test_plain_and_async_tools() -> None:
    plain = await run_local_tool(_call("weather", '{"city": "波尔图"}'), TOOLS)
    assert (plain.role, plain.tool_call_id, plain.name, plain.content) == ("tool", "c1", "weather", "波尔图: 晴")
    structured = await run_local_tool(_call("forecast", '{"city": "里斯本", "days": 1}'), TOOLS)
    assert structured.content == '{"city": "里斯本", "days": ["晴"]}'  # JSON, CJK kept as it is


@pytest.mark.parametrize(
    ("name", "arguments", "says"),
    [
        ("nope", "{}", "tool 'nope' is not available (available: broken, forecast, weather)"),
        ("weather", '{"city": ', "arguments are not valid JSON"),
        ("weather", '["Lisbon"]', "arguments must be a JSON object, got list"),
        ("weather", '{"town": "Lisbon"}', "TypeError"),
        ("broken", '{"city": "Lisbon"}', "RuntimeError: upstream down for Lisbon"),
    ],
)
async def test_failures_are_answered_as_errors(name: str, arguments: str, says: str) -> None:
    result = await run_local_tool(_call(name, arguments), TOOLS)
    assert result.role == "tool" and result.tool_call_id == "c1"
    assert says in json.loads(result.content or "")["error"]


async def test_empty_arguments_are_no_arguments() -> None:
    result = await run_local_tool(_call("forecast", ""), {"forecast": lambda: "no args needed"})
    assert result.content == "no args needed"
