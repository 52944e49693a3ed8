"""The unit the assembly works on: one chat message plus where it came from."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from schemas import Message

Origin = Literal["history", "current", "restored", "resume", "summary"]
"""Why an item is in the request.

``history``: an event after the summary boundary (or all events without one);
``current``: the current user message; ``restored``: a covered event brought
back to keep a retained turn readable (a tool call whose result is retained, a
user message anchoring a retained turn); ``resume``: the resume tail after an
intra-run cutoff; ``summary``: a standalone user-mode summary message.
"""


@dataclass(frozen=True, slots=True)
class HistoryItem:
    """One message of the projected history, with the ids compaction needs."""

    message: Message
    event_id: str | None = None
    request_id: str = ""
    invocation_id: str = ""
    origin: Origin = "history"

    @property
    def unit_key(self) -> str | None:
        """The request (else invocation) this item belongs to; ``None`` when it has neither."""
        if self.request_id:
            return f"req:{self.request_id}"
        if self.invocation_id:
            return f"inv:{self.invocation_id}"
        return None

    def with_message(self, message: Message) -> HistoryItem:
        return dataclasses.replace(self, message=message)


def to_chat_message(message: Message, *, include_reasoning: bool = False) -> dict[str, Any]:
    """The chat-completions JSON of a message (producers' extra fields dropped).

    ``name`` is left out of tool messages, which the API identifies by
    ``tool_call_id`` alone.
    """
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.role == "tool":
        out["tool_call_id"] = message.tool_call_id
        if out["content"] is None:
            out["content"] = ""
        return out
    if message.tool_calls:
        out["tool_calls"] = [
            {
                "id": call.id,
                "type": call.type,
                "function": {"name": call.function.name, "arguments": call.function.arguments},
            }
            for call in message.tool_calls
        ]
    if message.name and message.role != "system":
        out["name"] = message.name
    if include_reasoning and message.reasoning_content:
        out["reasoning_content"] = message.reasoning_content
    return out
