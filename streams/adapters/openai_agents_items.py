"""Responses-API input items (the OpenAI Agents SDK's session items) ⇄ distill session events.

Pure functions over plain dicts: no SDK import. One item is one event:

- a message (``role`` user / assistant / system / developer; ``content`` a string or
  a list of parts) → a message of that role (developer → system), its text parts joined,
  an image, file or audio part named in its place (:mod:`.attachments`: kind, MIME type,
  size, file name, URL or file id; never the inline data);
- ``function_call`` → an assistant message with one tool call (``call_id``, ``name``, ``arguments``);
  ``custom_tool_call`` the same, its ``input`` as the arguments;
- ``function_call_output`` (``custom_tool_call_output``) → a tool message answering ``call_id``;
- ``reasoning`` → an assistant message whose ``reasoning_content`` is the summary texts;
- any other item type (hosted and built-in tools: ``mcp_call``, ``file_search_call``,
  ``code_interpreter_call``, ``local_shell_call_output``, ...) → an assistant message whose text
  is the item's type and fields (:func:`item_text`): the next request gives the model the item
  back, so the summary that covers it must read what it holds.

The item itself rides in the event's ``native`` block (see :mod:`.native`), so
:func:`event_to_items` gives it back exactly; events another producer
published (no ``native`` block) are converted from their chat message.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from schemas import FunctionCall, Message, SessionEvent, SessionKey, ToolCall
from schemas.text import utf8_record
from streams.adapters.attachments import attachment_text, inline_size, is_inline, kind_of
from streams.adapters.native import Path, native_block, native_of, restore_record

ITEM_FORMAT = "openai-agents/response-item"
_TEXT_PARTS = frozenset({"input_text", "output_text", "text", "refusal"})


def _part_text(part: Any) -> str | None:
    """A part's text, or the name of the image, file or audio it attaches (:func:`_attachment`)."""
    if isinstance(part, Mapping) and part.get("type") in _TEXT_PARTS:
        value = part.get("text", part.get("refusal"))
        return value if isinstance(value, str) else None
    return _attachment(part)


def _attachment(part: Any) -> str | None:
    """``input_image`` / ``input_file`` / ``input_audio`` named in text (kind, MIME type, size, file name,
    URL or file id), the inline data left out: the model saw it, so the summary input must name it."""
    if not isinstance(part, Mapping):
        return None
    kind = part.get("type")
    refs: list[str | None] = []
    mime: str | None = None
    size: int | None = None
    if kind == "input_image":
        url = part.get("image_url")
        if isinstance(url, str) and is_inline(url):
            mime, size = inline_size(url)
        elif isinstance(url, str):
            refs.append(url)
        refs.append(f"file_id={part['file_id']}" if part.get("file_id") else None)
        return attachment_text(kind_of(mime, "image"), mime, size, *refs)
    if kind == "input_file":
        data = part.get("file_data")
        if isinstance(data, str) and data:
            mime, size = inline_size(data)
        refs += [part.get("filename"), part.get("file_url")]
        refs.append(f"file_id={part['file_id']}" if part.get("file_id") else None)
        return attachment_text(kind_of(mime), mime, size, *(str(r) for r in refs if r))
    if kind == "input_audio":
        nested = part.get("input_audio")
        audio: Mapping[str, Any] = nested if isinstance(nested, Mapping) else part
        data = audio.get("data")
        fmt = audio.get("format")
        size = inline_size(data)[1] if isinstance(data, str) and data else None
        return attachment_text("audio", f"audio/{fmt}" if fmt else None, size)
    return None


def _message_content(item: Mapping[str, Any]) -> tuple[str | None, Path | None]:
    """The text of a message item and the path holding it when one field holds all of it."""
    content = item.get("content")
    if isinstance(content, str):
        return content, ("content",)
    if not isinstance(content, list):
        return None, None
    texts = [(i, _part_text(p)) for i, p in enumerate(content)]
    found = [(i, t) for i, t in texts if t is not None]
    if not found:
        return None, None
    if len(found) == 1 and len(content) == 1 and _attachment(content[0]) is None:
        i, text = found[0]
        key = "text" if isinstance(content[i], Mapping) and "text" in content[i] else "refusal"
        return text, ("content", i, key)
    return "".join(t for _, t in found), None


_BOOKKEEPING = frozenset({"type", "id", "status", "encrypted_content"})
"""Fields of an item that say nothing to a reader (``encrypted_content``: opaque to anyone but the provider)."""


def _without_inline_data(value: Any) -> Any:
    if isinstance(value, str):
        return f"<{len(value):,} characters of inline data>" if is_inline(value) else value
    if isinstance(value, Mapping):
        return {k: _without_inline_data(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_inline_data(v) for v in value]
    return value


def item_text(item: Mapping[str, Any]) -> str | None:
    """The text of an item of a type without a chat message of its own: ``[<type>] <fields as JSON>``.

    Bookkeeping fields are left out and inline data (a data URI, a long base64 run: a screenshot, a
    generated image) is named by its size instead of copied. ``None`` when nothing is left.
    """
    fields = {k: _without_inline_data(v) for k, v in item.items() if k not in _BOOKKEEPING and v not in (None, "")}
    if not fields:
        return None
    return f"[{item.get('type') or 'item'}] {json.dumps(fields, ensure_ascii=False)}"


def item_call_id(item: Mapping[str, Any]) -> str:
    """The id a call item's tool call gets in distill (and its result's ``tool_call_id``)."""
    return str(item.get("call_id") or item.get("id") or "call")


def item_message(item: Mapping[str, Any]) -> tuple[Message, Path | None]:
    """The chat message standing for ``item`` and the path of its text inside the item."""
    kind = item.get("type")
    if kind in ("function_call", "custom_tool_call"):
        arguments = item.get("arguments" if kind == "function_call" else "input", "")
        function = FunctionCall(name=str(item.get("name", "")), arguments=str(arguments))
        call = ToolCall(id=item_call_id(item), function=function)
        return Message(role="assistant", content=None, tool_calls=(call,)), None
    if kind in ("function_call_output", "custom_tool_call_output"):
        output = item.get("output")
        if isinstance(output, str):
            return Message(role="tool", tool_call_id=str(item.get("call_id")), content=output), ("output",)
        text = "".join(t for t in (_part_text(p) for p in output or []) if t) if isinstance(output, list) else None
        return Message(role="tool", tool_call_id=str(item.get("call_id")),
                       content=text if text else json.dumps(output, ensure_ascii=False)), None  # fmt: skip
    if kind == "reasoning":
        summary = item.get("summary") or []
        texts = [str(s.get("text", "")) for s in summary if isinstance(s, Mapping)]
        return Message(role="assistant", content=None, reasoning_content="\n".join(texts) or None), None
    role = item.get("role")
    if kind in (None, "message") and role in ("user", "assistant", "system", "developer"):
        text, path = _message_content(item)
        return Message(role="system" if role == "developer" else role, content=text), path
    return Message(role="assistant", content=item_text(item)), None


def item_to_event(
    item: Mapping[str, Any], key: SessionKey, *, event_id: str, timestamp: datetime, request_id: str,
    agent_name: str = "assistant", filter_key: str = "",
) -> SessionEvent:  # fmt: skip
    """``item`` as a session event of ``key`` under ``filter_key`` (the item kept in ``native``)."""
    record = json.loads(json.dumps(item, ensure_ascii=False))
    message, path = item_message(record)
    author = "user" if message.role == "user" else agent_name
    event = SessionEvent.model_validate(
        {
            "app_name": key.app_name, "user_id": key.user_id, "session_id": key.session_id,
            "event_id": event_id, "timestamp": timestamp, "request_id": request_id, "invocation_id": request_id,
            "author": author, "filter_key": filter_key, "message": message,
            "native": native_block(ITEM_FORMAT, record, path, message.content),
        }
    )  # fmt: skip
    return utf8_record(event)  # a lone surrogate (a tool's output of non-UTF-8 bytes) could not be published


def event_to_items(event: SessionEvent, content: str | None = None) -> list[dict[str, Any]]:
    """The item(s) ``event`` stands for; ``content`` (e.g. a compacted text) replaces the stored text.

    An event with a ``native`` item gives it back; any other event is built from
    its message (an assistant message with several tool calls gives one
    ``function_call`` item per call).
    """
    text = event.message.content if content is None else content
    block = native_of(event, ITEM_FORMAT)
    if block is not None:
        record = restore_record(block, text)
        if content is not None and not block.get("content_at"):
            record = _with_text(record, content)
        return [record]
    return message_items(event.message, text)


def _with_text(record: dict[str, Any], content: str) -> dict[str, Any]:
    """A compacted text put into an item whose text was not one field (list outputs, several parts)."""
    if record.get("type") in ("function_call_output", "custom_tool_call_output"):
        record["output"] = content
    elif isinstance(record.get("content"), list):
        record["content"] = content
    return record


def message_items(message: Message, text: str | None) -> list[dict[str, Any]]:
    """Items for a chat message published without a native item."""
    if message.role == "tool":
        return [{"type": "function_call_output", "call_id": message.tool_call_id or "", "output": text or ""}]
    items: list[dict[str, Any]] = []
    if text:
        items.append({"role": message.role, "content": text})
    items.extend(
        {"type": "function_call", "call_id": c.id, "name": c.function.name, "arguments": c.function.arguments}
        for c in message.tool_calls
    )
    return items


def summary_item(summary_text: str) -> dict[str, Any]:
    """The item that carries the session summary at the start of the history."""
    return {"role": "system", "content": f"Summary of the earlier conversation:\n{summary_text}"}
