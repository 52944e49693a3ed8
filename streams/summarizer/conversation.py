"""Conversation text: the events of a delta as ``author: content`` lines.

Formatters only shape the summary input; trigger thresholds always count
with the default text, so a custom formatter never changes when a summary
fires.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from schemas import Message, SessionEvent, ToolCall
from streams.rules.eligibility import shown_message
from streams.rules.threshold_text import format_tool_call, format_tool_result

ToolCallFormatter = Callable[[ToolCall], str]
"""Renders one tool call; ``""`` leaves it out of the summary input."""

ToolResultFormatter = Callable[[Message], str]
"""Renders one tool result message; ``""`` leaves it out of the summary input."""

UNKNOWN_AUTHOR = "unknown"


default_tool_call_formatter: ToolCallFormatter = format_tool_call
"""``[Called tool: NAME with args: ARGS]`` (the trigger engine's own formatter)."""

default_tool_result_formatter: ToolResultFormatter = format_tool_result
"""``[NAME returned: CONTENT]`` (the trigger engine's own formatter)."""


def is_summarizable(event: SessionEvent) -> bool:
    """Streaming chunks and ``skip_summarization`` events never reach a summary."""
    return not event.partial and not event.skip_summarization


def is_tool_result(message: Message) -> bool:
    """A tool result, whichever way the producer marked it."""
    return message.role == "tool" or bool(message.tool_call_id)


@dataclass(frozen=True)
class ConversationFormatter:
    """Turns events into the summary input text."""

    tool_call: ToolCallFormatter = default_tool_call_formatter
    tool_result: ToolResultFormatter = default_tool_result_formatter

    def event_lines(self, event: SessionEvent) -> list[str]:
        """The lines of one event; reasoning content is never included.

        An error event without content reads as the prompt shows it
        (``type: <t>, message: <m>``, :func:`~streams.rules.eligibility.shown_message`).
        """
        if not is_summarizable(event):
            return []
        author = event.author or UNKNOWN_AUTHOR
        message = shown_message(event)
        lines = [f"{author}: {text}" for text in map(self.tool_call, message.tool_calls) if text]
        if is_tool_result(message):
            text = self.tool_result(message)
            if text:
                lines.append(f"{author}: {text}")
            return lines
        line = _content_line(author, message)
        if line:
            lines.append(line)
        return lines

    def event_text(self, event: SessionEvent) -> str:
        """One event's lines joined by newlines (``""`` when nothing is left)."""
        message = event.message
        if (
            not message.tool_calls
            and message.role != "tool"
            and not message.tool_call_id
            and type(self).event_lines is _EVENT_LINES
        ):
            # A plain message (most events; the text of every job's request) is one line at most:
            # ``event_lines``' own, without its list and the join (``is_tool_result`` and
            # ``is_summarizable`` inlined: this runs for every event of every job's cache key).
            if event.partial or event.skip_summarization:
                return ""
            content = message.content
            if content:
                content = content.strip()
                return f"{event.author or UNKNOWN_AUTHOR}: {content}" if content else ""
            # No content: an error event reads as its error (``shown_message``).
            return _content_line(event.author or UNKNOWN_AUTHOR, shown_message(event))
        return "\n".join(self.event_lines(event))

    def conversation_text(self, events: Iterable[SessionEvent], previous_summary: str = "") -> str:
        """All events' texts, empty ones skipped.

        A non-empty ``previous_summary`` becomes the first line
        (``system: <summary>``): the guide's merged mode for prompts without
        ``{previous_summary}``.
        """
        parts = [f"system: {previous_summary.strip()}"] if previous_summary.strip() else []
        parts.extend(t for t in map(self.event_text, events) if t)
        return "\n".join(parts)


def _content_line(author: str, message: Message) -> str:
    """A message's content as its line (``""``: no content)."""
    content = (message.content or "").strip()
    return f"{author}: {content}" if content else ""


_EVENT_LINES = ConversationFormatter.event_lines

DEFAULT_FORMATTER = ConversationFormatter()
