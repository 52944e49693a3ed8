"""Event builders and an in-process scripted model for the summarizer tests."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from schemas import SessionEvent, SessionKey
from streams.summarizer.model import ModelResponse, ModelUsage
from streams.summarizer.request import ChatRequest

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
SESSION = SessionKey("app", "u1", "s1")


def event(
    i: int,
    author: str,
    content: str | None = None,
    *,
    role: str | None = None,
    tool_calls: Iterable[tuple[str, str, str]] = (),
    tool_call_id: str | None = None,
    name: str | None = None,
    **flags: Any,
) -> SessionEvent:
    """Event ``e<i>`` at ``T0 + i`` seconds; ``tool_calls`` as ``(id, name, args)``."""
    message: dict[str, Any] = {
        "role": role or ("user" if author == "user" else "tool" if tool_call_id else "assistant"),
        "content": content,
        "tool_calls": [
            {"id": c, "type": "function", "function": {"name": n, "arguments": a}} for c, n, a in tool_calls
        ],
    }
    if tool_call_id:
        message["tool_call_id"] = tool_call_id
    if name:
        message["name"] = name
    reasoning = flags.pop("reasoning_content", None)
    if reasoning:
        message["reasoning_content"] = reasoning
    return SessionEvent(
        app_name=SESSION.app_name,
        user_id=SESSION.user_id,
        session_id=SESSION.session_id,
        event_id=f"e{i}",
        timestamp=T0 + timedelta(seconds=i),
        author=author,
        message=message,
        **flags,
    )


def rounds(n: int, words: int = 8, start: int = 0, tools: bool = False) -> list[SessionEvent]:
    """``n`` user/assistant rounds (optionally with a tool call and result in each)."""
    out: list[SessionEvent] = []
    i = start
    for r in range(n):
        out.append(event(i, "user", f"question {r} " + " ".join(f"u{r}w{k}" for k in range(words))))
        i += 1
        if tools:
            out.append(event(i, "agent", None, tool_calls=[(f"call{r}", "lookup", f'{{"q": {r}}}')]))
            i += 1
            out.append(event(i, "agent", f"result {r} " + "x" * words, tool_call_id=f"call{r}", name="lookup"))
            i += 1
        out.append(event(i, "agent", f"answer {r} " + " ".join(f"a{r}w{k}" for k in range(words))))
        i += 1
    return out


class ScriptedModel:
    """A model answering from a queue of texts or exceptions; records every request."""

    def __init__(
        self,
        *replies: str | BaseException,
        name: str = "scripted",
        context_window: int | None = 1000,
        provider_budget: int | None = None,
        default: str = "a summary",
        usage: ModelUsage | None = None,
    ) -> None:
        self.name = name
        self.context_window = context_window
        self.provider_budget = provider_budget
        self.replies: deque[str | BaseException] = deque(replies)
        self.default = default
        self.usage = usage or ModelUsage()
        self.requests: list[ChatRequest] = []

    async def complete(self, request: ChatRequest) -> ModelResponse:
        self.requests.append(request.clone())
        reply = self.replies.popleft() if self.replies else self.default
        if isinstance(reply, BaseException):
            raise reply
        return ModelResponse(text=reply, model=self.name, usage=self.usage)


def user_text(request: ChatRequest) -> str:
    """The content of the request's last user message."""
    return str([m for m in request.messages if m["role"] == "user"][-1]["content"])


MARKER = re.compile(r"\b[A-Z]\d+\b")


def markers(text: str) -> list[str]:
    """The oracle markers (``M12``, ``P3``: a capital and digits) in ``text``."""
    return MARKER.findall(text)


class EchoModel(ScriptedModel):
    """Answers the scripted faults first, then echoes every marker of the request it got."""

    async def complete(self, request: ChatRequest) -> ModelResponse:
        if self.replies:
            return await super().complete(request)
        self.requests.append(request.clone())
        seen = " ".join(str(m.get("content") or "") for m in request.messages)
        return ModelResponse(text=" ".join(dict.fromkeys(markers(seen))), model=self.name, usage=self.usage)


def request_messages(events: Iterable[SessionEvent]) -> list[dict[str, Any]]:
    """The events as chat-completions messages, as a caller's own request would hold them."""
    out: list[dict[str, Any]] = []
    for e in events:
        m = e.message
        raw: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.tool_calls:
            raw["tool_calls"] = [c.model_dump() for c in m.tool_calls]
        if m.tool_call_id:
            raw["tool_call_id"] = m.tool_call_id
        out.append(raw)
    return out
