"""Event builders for the rules tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from schemas import Message, SessionEvent, SessionSummary, SummaryBoundary, SummaryReport, TriggerReport

APP = "app"
T0 = datetime(2025, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def ev(
    event_id: str,
    seconds: float = 0,
    *,
    role: str = "assistant",
    content: str | None = "hello there",
    key: str = "",
    request_id: str = "r1",
    author: str | None = None,
    tool_calls: list[tuple[str, str, str]] | None = None,
    tool_call_id: str | None = None,
    name: str | None = None,
    **extra: Any,
) -> SessionEvent:
    message: dict[str, Any] = {"role": role, "content": content, "tool_call_id": tool_call_id, "name": name}
    if "reasoning_content" in extra:
        message["reasoning_content"] = extra.pop("reasoning_content")
    if tool_calls:
        message["tool_calls"] = [
            {"id": cid, "type": "function", "function": {"name": fn, "arguments": args}} for cid, fn, args in tool_calls
        ]
    return SessionEvent(
        app_name=APP,
        user_id="u",
        session_id="s",
        event_id=event_id,
        timestamp=at(seconds),
        request_id=request_id,
        author=author or ("user" if role == "user" else "agent"),
        filter_key=key,
        message=Message.model_validate(message),
        **extra,
    )


def summary(
    version: int,
    last_event_id: str | None,
    cutoff_seconds: float,
    *,
    key: str = "",
    job_id: str = "job",
) -> SessionSummary:
    return SessionSummary(
        app_name=APP,
        user_id="u",
        session_id="s",
        filter_key=key,
        summary="text",
        version=version,
        boundary=SummaryBoundary(cutoff_at=at(cutoff_seconds), last_event_id=last_event_id),
        model="m",
        prompt_version="p1",
        created_at=at(cutoff_seconds),
        report=SummaryReport(trigger=TriggerReport(name="manual")),
        job_id=job_id,
    )
