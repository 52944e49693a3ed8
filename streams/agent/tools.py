"""Running the runtime's own tools for the facade: a tool call in, a tool result message out.

A local tool is a function (plain or ``async``) called with the call's JSON
arguments as keyword arguments; a string result is sent as it is, anything
else as JSON. Like the recall executor, this never raises for what the model
or the tool did: bad arguments, an unknown tool or a tool that raised are
answered as ``{"error": ...}`` (the exception logged with its traceback), so
the model can correct itself and the loop goes on. Cancellation propagates.
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from schemas import Message, ToolCall
from schemas.text import utf8_text

log = logging.getLogger(__name__)

LocalTool = Callable[..., Any]


def tool_result(call: ToolCall, content: str) -> Message:
    return Message(role="tool", tool_call_id=call.id, name=call.function.name, content=utf8_text(content))


def error_result(call: ToolCall, error: str) -> Message:
    return tool_result(call, json.dumps({"error": error}, ensure_ascii=False))


def _arguments(call: ToolCall) -> dict[str, Any] | str:
    """The call's arguments object, or the reason it is not one."""
    raw = call.function.arguments
    if not raw or not raw.strip():
        return {}
    try:
        args = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        return f"arguments are not valid JSON: {exc}"
    if not isinstance(args, dict):
        return f"arguments must be a JSON object, got {type(args).__name__}"
    return args


async def run_local_tool(call: ToolCall, tools: Mapping[str, LocalTool]) -> Message:
    """The result of ``call`` from ``tools`` (by function name)."""
    name = call.function.name
    fn = tools.get(name)
    if fn is None:
        offered = ", ".join(sorted(tools)) or "none"
        return error_result(call, f"tool {name!r} is not available (available: {offered})")
    args = _arguments(call)
    if isinstance(args, str):
        return error_result(call, args)
    try:
        result = fn(**args)
        if inspect.isawaitable(result):
            result = await result
    except Exception as exc:  # the tool's failure is the model's to handle, not the agent loop's end
        log.warning("tool %s raised", name, exc_info=exc)
        return error_result(call, f"{type(exc).__name__}: {exc}")
    content = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)
    return tool_result(call, content)
