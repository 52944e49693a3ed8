"""``EventFacts``: everything the trigger state needs from one event, computed once.

The planner computes the facts of an event once (one token count) and folds them
into every affected ``(session, filter key)`` state.
"""

from __future__ import annotations

from typing import NamedTuple

from schemas import SessionEvent
from streams.rules.boundaries import to_micros
from streams.rules.counters import F_CONTENT, F_KEYWORD, F_USER, PendingEvent
from streams.rules.threshold_text import conversation_length, conversation_lines, format_tool_call
from streams.rules.tokens import SimpleTokenCounter, TiktokenCounter, TokenCounter, get_token_counter


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
    longest stripped text part.

    The conversation text is only built for counters that read it: the simple
    counter needs its length alone (:func:`conversation_length`).
    """
    message = event.message
    reasoning = message.reasoning_content
    reasoning = reasoning.strip() if reasoning else ""
    content = message.content
    content_len = len(content.strip()) if content else 0
    if type(counter) is SimpleTokenCounter:
        tokens = counter.count_length(conversation_length(event))
        if reasoning:
            tokens += counter.count_length(len(reasoning))
    else:
        text = conversation_lines(event)
        tokens = counter.count_text(text) if text else 0
        if reasoning:
            tokens += counter.count_text(reasoning)
    return tokens, max(content_len, len(reasoning))


def has_keyword(keywords: tuple[str, ...], *texts: str) -> bool:
    """Whether some text contains one of ``keywords`` (lower-cased), ignoring case."""
    for text in texts:
        if text:
            lowered = text.lower()
            for keyword in keywords:
                if keyword in lowered:
                    return True
    return False


def event_facts(
    event: SessionEvent,
    counter: TokenCounter | None = None,
    offset: int | None = None,
    keywords: tuple[str, ...] = (),
) -> EventFacts:
    """The facts of ``event``; tokens with ``counter`` (default: the process-wide one).

    ``keywords`` (lower-cased, see ``SummaryPolicy.important_keywords``) flag a
    counted event whose content or reasoning contains one (``F_KEYWORD``).

    Inlines the rules of ``eligibility`` (``is_counted``, ``is_user_turn``,
    ``is_model_output``) and, for the simple counter, of
    :func:`threshold_tokens`: this runs once per event on the hot path.
    """
    message = event.message
    counted = not event.partial and not event.skip_summarization
    content = message.content
    content = content.strip() if content else ""
    reasoning = message.reasoning_content
    reasoning = reasoning.strip() if reasoning else ""
    tool_calls = message.tool_calls
    result_id = message.tool_call_id
    role = message.role
    author = event.author
    user = role == "user" and not result_id
    if not counted:
        tokens = text_len = 0
    else:
        if counter is None:
            counter = get_token_counter()
        if type(counter) is SimpleTokenCounter:
            # conversation_length, inlined
            prefix = len(author or "unknown") + 2
            size = lines = 0
            for call in tool_calls:
                line = len(format_tool_call(call))
                if line:
                    size += prefix + line
                    lines += 1
            if content:
                size += prefix + len(content) + (len(message.name or "tool") + 13 if result_id else 0)
                lines += 1
            if lines:
                size += lines - 1
            rate = counter.approx_runes_per_token
            tokens = (max(1, int(size / rate)) if size else 0) + (
                max(1, int(len(reasoning) / rate)) if reasoning else 0
            )
        else:
            # conversation_lines, inlined for the common one-line event
            if tool_calls:
                text = conversation_lines(event)
            elif not content:
                text = ""
            elif result_id:
                text = f"{author or 'unknown'}: [{message.name or 'tool'} returned: {content}]"
            else:
                text = f"{author or 'unknown'}: {content}"
            if type(counter) is TiktokenCounter:
                encode = counter.encode_ordinary
                tokens = (len(encode(text)) if text else 0) + (len(encode(reasoning)) if reasoning else 0)
            else:
                tokens = counter.count_text(text) if text else 0
                if reasoning:
                    tokens += counter.count_text(reasoning)
        text_len = len(content) if len(content) > len(reasoning) else len(reasoning)
    model_output = (
        counted
        and not user
        and not tool_calls
        and event.error is None
        and (role == "assistant" or role == "tool")
        and bool(content or reasoning or result_id)
    )
    return _new_tuple(
        EventFacts,
        (
            _new_tuple(
                PendingEvent,
                (
                    event.event_id,
                    to_micros(event.timestamp),
                    tokens,
                    event.filter_key,
                    (F_USER if user else 0)
                    | (F_CONTENT if tokens else 0)
                    | (F_KEYWORD if keywords and counted and has_keyword(keywords, content, reasoning) else 0),
                    text_len,
                ),
            ),
            event.app_name,
            event.request_id,
            counted,
            model_output,
            result_id,
            tuple([call.id for call in tool_calls]) if tool_calls else (),
            event.model,
            event.context_window,
            offset,
        ),
    )


_new_tuple = tuple.__new__
