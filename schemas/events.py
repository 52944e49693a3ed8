"""Session events: what agent runtimes publish on the events topic."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, WithJsonSchema, field_validator

from schemas.base import ProducerModel, RequestContext, SessionRecord, WireBool, WireInt, as_utc, json_integer

Role = Literal["user", "assistant", "tool", "system"]

FILTER_KEY_PATTERN = r"^$|^[^/]+(/[^/]+)*$"
"""``""`` (the whole session) or non-empty ``/``-separated segments; in the exported schema too."""

TIMESTAMP_PATTERN = (
    r"^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])[Tt ]([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?"
    r"([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d)?$"
)
"""An RFC 3339 date-time (``T`` or a space between date and time; no offset is read as UTC).

The exported schema carries it with ``format: date-time``: the pattern checks
the shape and the ranges, a validator that checks formats also the calendar
(a 30 February matches the pattern; the parser refuses it)."""
_TIMESTAMP_RE = re.compile(TIMESTAMP_PATTERN)

_CONTENT_PART_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["type"],
    "properties": {"type": {"type": "string", "minLength": 1}},
    "if": {"properties": {"type": {"const": "text"}}},
    "then": {"required": ["text"], "properties": {"text": {"type": "string"}}},
}
ContentParts = Annotated[
    list[dict[str, Any]],
    WithJsonSchema({"type": "array", "items": _CONTENT_PART_SCHEMA}),
]
"""The list-of-parts ``content`` (OpenAI shape): objects with a ``type``; a ``"text"`` part has a string ``text``."""


def flatten_content_parts(parts: list[Any]) -> str:
    """The text of a list-of-parts ``content``, text parts joined in order; other parts (images...) carry none.

    Raises ``ValueError`` naming the part that is not a part object, or a text
    part without a string ``text``.
    """
    texts: list[str] = []
    for i, part in enumerate(parts):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str) or not part["type"]:
            raise ValueError(f"content[{i}] must be an object with a non-empty string 'type'")
        if part["type"] == "text":
            text = part.get("text")
            if not isinstance(text, str):
                raise ValueError(f"content[{i}] is a text part: its 'text' must be a string")
            texts.append(text)
    return "".join(texts)


class FunctionCall(ProducerModel):
    """The function part of an OpenAI tool call; ``arguments`` is the raw JSON text."""

    name: str
    arguments: str = ""


class ToolCall(ProducerModel):
    """One tool call of an assistant message (OpenAI chat-completions shape)."""

    id: str = Field(min_length=1)
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(ProducerModel):
    """An OpenAI chat-completions message, plus the optional ``reasoning_content``."""

    role: Role
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    reasoning_content: str | None = None

    @field_validator("content", mode="before", json_schema_input_type=str | ContentParts | None)
    @classmethod
    def _flatten_content_parts(cls, value: Any) -> Any:
        # Producers may send the list-of-parts form (the SDKs' user and tool messages); keep the text parts.
        return flatten_content_parts(value) if isinstance(value, list) else value

    @field_validator("tool_calls", mode="before", json_schema_input_type=list[ToolCall] | None)
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        # The OpenAI SDK dumps a message without calls as ``tool_calls: None``.
        return () if value is None else value


class ErrorInfo(ProducerModel):
    """An error the runtime attached to the event (``{type, message, code}``)."""

    type: str | None = None
    message: str | None = None
    code: str | WireInt | None = None


class Usage(ProducerModel):
    """Provider token counts, as reported to the runtime."""

    prompt_tokens: WireInt = 0
    completion_tokens: WireInt = 0
    total_tokens: WireInt = 0


class SessionEvent(SessionRecord):
    """One completed event of a session (``type: "event"``)."""

    type: Literal["event"] = "event"
    event_id: str = Field(min_length=1)
    timestamp: datetime = Field(json_schema_extra={"pattern": TIMESTAMP_PATTERN})
    """RFC 3339 (see ``TIMESTAMP_PATTERN``); a producer's string in another form is refused, as by the schema."""
    invocation_id: str = ""
    request_id: str = ""
    author: str = Field(min_length=1)
    filter_key: str = Field(default="", pattern=FILTER_KEY_PATTERN)
    """``""`` or non-empty ``/``-separated segments (checked by pydantic's own regex: no Python call per record)."""
    message: Message
    partial: WireBool = False
    skip_summarization: WireBool = False
    error: ErrorInfo | None = None
    model: str | None = None
    # The bound before the validator: after it, pydantic writes a non-standard ``gt`` into the JSON Schema.
    context_window: Annotated[int, Field(gt=0), BeforeValidator(json_integer)] | None = None
    usage: Usage | None = None
    context: RequestContext = Field(default_factory=dict)
    """Per-request markers for custom checks and the summarizer (see ``schemas.base.RequestContext``)."""

    @property
    def shown_text(self) -> str:
        """The text a request shows of this event: its content, else (an error event without text) the error as
        ``type: <t>, message: <m>`` (the Go rule). What a cut or a note naming the event stands for, so what
        ``session_load`` returns of it."""
        if self.message.content or self.error is None:
            return self.message.content or ""
        return f"type: {self.error.type}, message: {self.error.message}"

    @field_validator("timestamp", mode="before")
    @classmethod
    def _timestamp_rfc3339(cls, value: Any) -> Any:
        """RFC 3339 text (pydantic alone also takes numbers and other date forms), as a UTC datetime.

        Parsed here, in the one validator every event runs (an ``after`` validator for the UTC
        conversion was a second Python call per record): ``datetime.fromisoformat`` reads every
        form the pattern admits as pydantic does (fractions past microseconds truncated), once
        the pattern's lower-case ``t``/``z`` are upper-cased; the calendar is checked by it too.
        """
        if isinstance(value, datetime):
            return as_utc(value)
        if not isinstance(value, str) or not _TIMESTAMP_RE.match(value):
            raise ValueError("timestamp must be an RFC 3339 date-time string, e.g. 2026-05-02T09:00:00Z")
        try:
            parsed = datetime.fromisoformat(value.upper())
            # Most stamps end in ``Z``: parsed in UTC already (``as_utc`` would convert them again).
            return parsed if parsed.tzinfo is UTC else as_utc(parsed)
        except (ValueError, OverflowError):
            # Not the parser's text: it quotes the value (a dead letter's reason never does).
            raise ValueError("timestamp is not a valid date-time (a day, time or UTC instant out of range)") from None
