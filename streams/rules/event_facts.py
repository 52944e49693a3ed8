"""``EventFacts``: everything the trigger state needs from one event, computed once.

The planner computes the facts of an event once (one token count) and folds them
into every affected ``(session, filter key)`` state.
"""

from __future__ import annotations

from typing import NamedTuple

from schemas import SessionEvent
from streams.rules.boundaries import to_micros
from streams.rules.counters import F_CONTENT, F_USER, PendingEvent
from streams.rules.eligibility import is_counted, is_model_output, is_user_message
from streams.rules.threshold_text import conversation_lines, reasoning_text
from streams.rules.tokens import TokenCounter, get_token_counter


class EventFacts(NamedTuple):
    """The content-free view of one event."""

    entry: PendingEvent
    app_name: str
    request_id: str
    counted: bool
    """Not partial and not ``skip_summarization``."""
    model_output: bool
    """May trigger, if its tool round is complete (see ``eligibility``)."""
    tool_result_id: str | None
    opened_calls: tuple[str, ...]
    model: str | None
    context_window: int | None
    offset: int | None

    @property
    def event_id(self) -> str:
        return self.entry.event_id

    @property
    def filter_key(self) -> str:
        return self.entry.filter_key

    @property
    def ts(self) -> int:
        return self.entry.ts


def threshold_tokens(event: SessionEvent, counter: TokenCounter) -> tuple[int, int]:
    """Tokens of the event's threshold text (conversation lines + reasoning) and its
    longest stripped text part."""
    text = conversation_lines(event)
    reasoning = reasoning_text(event)
    tokens = counter.count_text(text) if text else 0
    if reasoning:
        tokens += counter.count_text(reasoning)
    content = (event.message.content or "").strip()
    return tokens, max(len(content), len(reasoning))


def event_facts(event: SessionEvent, counter: TokenCounter | None = None, offset: int | None = None) -> EventFacts:
    """The facts of ``event``; tokens with ``counter`` (default: the process-wide one)."""
    counted = is_counted(event)
    tokens, text_len = threshold_tokens(event, counter or get_token_counter()) if counted else (0, 0)
    flags = (F_USER if is_user_message(event) else 0) | (F_CONTENT if tokens else 0)
    message = event.message
    return EventFacts(
        PendingEvent(event.event_id, to_micros(event.timestamp), tokens, event.filter_key, flags, text_len),
        event.app_name,
        event.request_id,
        counted,
        is_model_output(event),
        message.tool_call_id,
        tuple(call.id for call in message.tool_calls),
        event.model,
        event.context_window,
        offset,
    )
