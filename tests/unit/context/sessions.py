"""A small builder of session event lists for the context tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from schemas import SessionEvent, SessionSummary, SummaryBoundary, SummaryReport, TriggerReport

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Session:
    """Appends events with increasing ids and timestamps (one second apart unless ``same_ts``)."""

    def __init__(self, session_id: str = "s1") -> None:
        self.session_id = session_id
        self.events: list[SessionEvent] = []
        self.request = "r1"
        self.invocation = "i1"

    def turn(self, request: str, invocation: str | None = None) -> Session:
        self.request, self.invocation = request, invocation or f"inv-{request}"
        return self

    def add(self, role: str, *, same_ts: bool = False, **fields: Any) -> SessionEvent:
        n = len(self.events) + 1
        ts = self.events[-1].timestamp if same_ts and self.events else T0 + timedelta(seconds=n)
        extra = {k: fields.pop(k) for k in ("partial", "skip_summarization", "error", "filter_key") if k in fields}
        event = SessionEvent(
            app_name="app",
            user_id="u1",
            session_id=self.session_id,
            event_id=fields.pop("event_id", f"e{n}"),
            timestamp=ts,
            request_id=fields.pop("request_id", self.request),
            invocation_id=fields.pop("invocation_id", self.invocation),
            author="user" if role == "user" else "agent",
            message={"role": role, **fields},
            **extra,
        )
        self.events.append(event)
        return event

    def user(self, text: str, **kw: Any) -> SessionEvent:
        return self.add("user", content=text, **kw)

    def answer(self, text: str, **kw: Any) -> SessionEvent:
        return self.add("assistant", content=text, **kw)

    def call(self, *calls: tuple[str, str] | tuple[str, str, str], **kw: Any) -> SessionEvent:
        tool_calls = [
            {"id": c[0], "type": "function", "function": {"name": c[1], "arguments": c[2] if len(c) > 2 else "{}"}}
            for c in calls
        ]
        return self.add("assistant", tool_calls=tool_calls, **kw)

    def result(self, call_id: str, content: str, name: str | None = None, **kw: Any) -> SessionEvent:
        return self.add("tool", tool_call_id=call_id, content=content, name=name, **kw)


def summary_at(
    event: SessionEvent | None,
    text: str = "the user asked about X",
    *,
    cutoff: datetime | None = None,
    with_id: bool = True,
) -> SessionSummary:
    """A summary whose boundary is ``event`` (by id, unless ``with_id`` is off) or ``cutoff``."""
    cutoff_at = cutoff if cutoff is not None else (event.timestamp if event else T0)
    return SessionSummary(
        app_name="app",
        user_id="u1",
        session_id="s1",
        summary=text,
        version=1,
        boundary=SummaryBoundary(
            cutoff_at=cutoff_at, last_event_id=event.event_id if event is not None and with_id else None
        ),
        model="m",
        prompt_version="p1",
        created_at=T0,
        report=SummaryReport(trigger=TriggerReport(name="manual")),
        job_id="j1",
    )
