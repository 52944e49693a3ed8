"""What a runtime hands the facade, as distill's records: messages in, session events out. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from schemas import Message, ToolCall, Usage
from streams.errors import DistillError

_MESSAGE_FIELDS = ("role", "content", "tool_calls", "tool_call_id", "name", "reasoning_content")
_CALL_FIELDS = ("id", "type", "function")


class InvalidMessageError(DistillError, ValueError):
    """A message the facade cannot record (not a chat-completions message); nothing was published."""


def _plain(value: object, what: str) -> dict[str, Any]:
    if isinstance(value, Mapping):
        return dict(value)
    dump = getattr(value, "model_dump", None)
    if callable(dump):  # the openai SDK's objects (ChatCompletionMessage, CompletionUsage) are pydantic models
        data = dump(exclude_none=True)
        if isinstance(data, dict):
            return data
    raise InvalidMessageError(
        f"{what} must be a schemas.Message, a mapping or a pydantic model, got {type(value).__name__}"
    )


def to_message(value: Message | Mapping[str, Any] | object) -> Message:
    """``value`` as a :class:`~schemas.Message`.

    Takes a ``Message``, a chat-completions message dict, or an SDK object with
    ``model_dump()`` (the ``openai`` client's ``ChatCompletionMessage``). Only
    the chat-completions fields are kept (``refusal``, ``annotations``, ... are
    not part of the session); ``reasoning_content`` is kept when the provider
    sends it.
    """
    if isinstance(value, Message):
        return value
    data = _plain(value, "a message")
    picked = {k: data[k] for k in _MESSAGE_FIELDS if data.get(k) is not None}
    calls = picked.get("tool_calls")
    if isinstance(calls, list | tuple):
        picked["tool_calls"] = [
            {k: c[k] for k in _CALL_FIELDS if k in c} if isinstance(c, Mapping) else c for c in calls
        ]
    try:
        return Message.model_validate(picked)
    except ValidationError as exc:
        raise InvalidMessageError(f"not a chat-completions message: {_first_error(exc)}") from exc


def to_usage(value: Usage | Mapping[str, Any] | object | None) -> Usage | None:
    """Provider token counts (``response.usage`` of the openai client, a dict, or ``None``)."""
    if value is None or isinstance(value, Usage):
        return value
    data = _plain(value, "usage")
    keys = ("prompt_tokens", "completion_tokens", "total_tokens")
    try:
        return Usage.model_validate({k: data[k] for k in keys if data.get(k) is not None})
    except ValidationError as exc:
        raise InvalidMessageError(f"not a usage record: {_first_error(exc)}") from exc


def tool_calls_of(value: Message | Mapping[str, Any] | object) -> tuple[ToolCall, ...]:
    """The tool calls of an assistant reply (any form :func:`to_message` takes)."""
    return to_message(value).tool_calls


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ())) or "message"
    return f"{where}: {err.get('msg', 'invalid')}"
