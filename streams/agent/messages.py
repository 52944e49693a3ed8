"""What a runtime hands the facade, as distill's records: messages in, session events out. Pure."""

from __future__ import annotations

import hashlib
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


def to_message(value: Message | Mapping[str, Any] | object, *, call_id: str | None = None) -> Message:
    """``value`` as a :class:`~schemas.Message`.

    Takes a ``Message``, a chat-completions message dict, or an SDK object with
    ``model_dump()`` (the ``openai`` client's ``ChatCompletionMessage``). Only
    the chat-completions fields are kept (``annotations``, ``audio`` data, ... are
    not part of the session); ``reasoning_content`` is kept when the provider
    sends it. What the model answered in place of ``content`` is its text: a
    ``refusal`` and a spoken reply's ``audio.transcript`` (:func:`_content`).

    The deprecated functions API: an assistant ``function_call`` (``{name, arguments}``,
    ``content`` null) is the reply's one tool call, id ``call_id`` (default: one derived
    from the call, :func:`function_call_id`); left out, the reply was an empty turn. A
    ``role: "function"`` result names its function, not a call: it is the ``tool``
    result of call ``call_id``; without one, ``InvalidMessageError`` (distill cannot
    tell which call it answers: send ``role: "tool"`` with the call's ``tool_call_id``,
    or let :meth:`DistillAgent.record` pair it with the call it recorded before).
    """
    if isinstance(value, Message):
        return value
    data = _plain(value, "a message")
    picked = {k: data[k] for k in _MESSAGE_FIELDS if data.get(k) is not None}
    _legacy_function(data, picked, call_id)
    content = _content(data)
    if content is not None:
        picked["content"] = content
    calls = picked.get("tool_calls")
    if isinstance(calls, list | tuple):
        picked["tool_calls"] = [
            {k: c[k] for k in _CALL_FIELDS if k in c} if isinstance(c, Mapping) else c for c in calls
        ]
    try:
        return Message.model_validate(picked)
    except ValidationError as exc:
        raise InvalidMessageError(f"not a chat-completions message: {_first_error(exc)}") from exc


def is_function_result(value: Message | Mapping[str, Any] | object) -> bool:
    """Whether ``value`` is a result of the deprecated functions API (``role: "function"``)."""
    if isinstance(value, Message):
        return False
    role = value.get("role") if isinstance(value, Mapping) else getattr(value, "role", None)
    return role == "function"


def function_call_id(name: str, arguments: str) -> str:
    """The id a legacy ``function_call`` gets without one given: the same call, the same id."""
    digest = hashlib.sha256(f"{name}\0{arguments}".encode("utf-8", "backslashreplace")).hexdigest()
    return f"call-fn-{digest[:24]}"


def _legacy_function(data: Mapping[str, Any], picked: dict[str, Any], call_id: str | None) -> None:
    """``picked`` with a functions-API call or result in the chat-completions shape (see :func:`to_message`)."""
    call = data.get("function_call")
    if isinstance(call, Mapping) and not picked.get("tool_calls"):
        name, arguments = call.get("name"), call.get("arguments") or ""
        if not isinstance(name, str) or not isinstance(arguments, str):
            raise InvalidMessageError("not a chat-completions message: function_call needs a name and text arguments")
        cid = call_id or function_call_id(name, arguments)
        picked["tool_calls"] = [{"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}]
    if data.get("role") == "function":
        answered = picked.get("tool_call_id") or call_id
        if not answered:
            raise InvalidMessageError(
                f"a role 'function' result (function {data.get('name')!r}) names no call: send it as role 'tool' "
                "with the call's tool_call_id, or record it right after the function_call it answers"
            )
        picked |= {"role": "tool", "tool_call_id": answered}


def _content(data: Mapping[str, Any]) -> Any:
    """The message's ``content`` with what the model answered outside it: its text (``None``: no content).

    A refusal (structured outputs: the ``refusal`` field, or a ``refusal`` part of a list content) and a
    spoken reply's ``audio.transcript`` come beside a null or partial ``content``: left out, the session
    held an assistant turn without what the user was told, in no request and no summary. They follow the
    content, each on a line of its own.
    """
    content = data.get("content")
    if isinstance(content, list):
        content = [_refusal_as_text(p) for p in content]
    extra = [data.get("refusal")]
    audio = data.get("audio")
    if isinstance(audio, Mapping):
        extra.append(audio.get("transcript"))
    found = [t for t in extra if isinstance(t, str) and t.strip()]
    if not found:
        return content
    if isinstance(content, list):
        return [*content, *({"type": "text", "text": f"\n{t}"} for t in found)]
    return "\n".join([content, *found] if isinstance(content, str) and content else found)


def _refusal_as_text(part: Any) -> Any:
    if isinstance(part, Mapping) and part.get("type") == "refusal" and isinstance(part.get("refusal"), str):
        return {"type": "text", "text": part["refusal"]}
    return part


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
