"""Session events: what agent runtimes publish on the events topic."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field, field_validator

from schemas.base import ProducerModel, RequestContext, SessionRecord, as_utc

Role = Literal["user", "assistant", "tool", "system"]


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

    @field_validator("content", mode="before")
    @classmethod
    def _flatten_content_parts(cls, value: Any) -> Any:
        # Producers may send the list-of-parts form; keep the text parts.
        if isinstance(value, list):
            texts = [p.get("text", "") for p in value if isinstance(p, dict) and p.get("type") == "text"]
            return "".join(texts)
        return value

    @field_validator("tool_calls", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return () if value is None else value


class ErrorInfo(ProducerModel):
    """An error the runtime attached to the event (``{type, message, code}``)."""

    type: str | None = None
    message: str | None = None
    code: str | int | None = None


class Usage(ProducerModel):
    """Provider token counts, as reported to the runtime."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class SessionEvent(SessionRecord):
    """One completed event of a session (``type: "event"``)."""

    type: Literal["event"] = "event"
    event_id: str = Field(min_length=1)
    timestamp: datetime
    invocation_id: str = ""
    request_id: str = ""
    author: str = Field(min_length=1)
    filter_key: str = ""
    message: Message
    partial: bool = False
    skip_summarization: bool = False
    error: ErrorInfo | None = None
    model: str | None = None
    context_window: int | None = Field(default=None, gt=0)
    usage: Usage | None = None
    context: RequestContext = Field(default_factory=dict)
    """Per-request markers for custom checks and the summarizer (see ``schemas.base.RequestContext``)."""

    @field_validator("timestamp")
    @classmethod
    def _timestamp_utc(cls, value: datetime) -> datetime:
        return as_utc(value)

    @field_validator("filter_key")
    @classmethod
    def _filter_key_shape(cls, value: str) -> str:
        if value and (value.startswith("/") or value.endswith("/") or "//" in value):
            raise ValueError("filter_key segments must be non-empty and '/'-separated")
        return value
