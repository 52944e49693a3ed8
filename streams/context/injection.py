"""Summary injection: where the summary goes in the request and how it is worded.

System mode merges it into the single leading system message (some models
reject a second system message or one that is not first). User mode puts it
next to the conversation (the system prefix stays stable for prompt caching),
in the first user turn that tailoring kept: it is never dropped with a round.

The request's notes on what it leaves out (:func:`place_notes`) change from
call to call, so they go at the other end: into the latest user turn (before
its text), after the tools, the system message, the prefix and the summary a
provider caches.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from schemas import Message

InjectionMode = Literal["system", "user"]
SummaryFormatter = Callable[[str], str]
"""Turns the summary text into the block that is injected (both modes)."""

SUMMARY_TAG = "summary_of_previous_interactions"


def default_system_format(summary: str) -> str:
    """The system-mode wrapper: the summary in a tagged block, the live conversation winning."""
    return (
        "What follows condenses your earlier exchanges with this user:\n\n"
        f"<{SUMMARY_TAG}>\n{summary}\n</{SUMMARY_TAG}>\n\n"
        "It was written before the messages below and may be out of date. Whenever it disagrees "
        "with the current conversation, trust the current conversation.\n"
    )


def default_user_format(summary: str) -> str:
    """The user-mode wrapper: neutral wording, since it sits in a user turn."""
    return (
        "Background from earlier in this conversation:\n\n"
        f"<{SUMMARY_TAG}>\n{summary}\n</{SUMMARY_TAG}>\n\n"
        "Take it as background only; where it conflicts with the messages that follow, "
        "the messages that follow are right."
    )


def format_summary(summary: str, mode: InjectionMode, formatter: SummaryFormatter | None = None) -> str:
    """The injected block: the custom formatter when given (any mode), else the mode's default."""
    if formatter is not None:
        return formatter(summary)
    return default_user_format(summary) if mode == "user" else default_system_format(summary)


def merge_into_system(messages: Sequence[Message], block: str) -> list[Message]:
    """Merge ``block`` into the first system message (``"\\n\\n"`` join), or add one in front."""
    out = list(messages)
    if not block:
        return out
    for i, msg in enumerate(out):
        if msg.role == "system":
            text = f"{msg.content}\n\n{block}" if msg.content else block
            out[i] = msg.model_copy(update={"content": text})
            return out
    return [Message(role="system", content=block), *out]


def place_in_user_turn(
    prefix: Sequence[Message], history: Sequence[Message], block: str
) -> tuple[list[Message], list[Message]]:
    """User-mode placement in the messages to be sent (after tailoring), first match wins.

    1. prepended to the first user message of the history (current turn included);
    2. else appended to the prefix's last message, when that is a user message;
    3. else a standalone user message at the start of the history.

    Placed after tailoring, never before: tailoring drops the oldest rounds first, and the
    summary is the only copy of what lies before its boundary (it must not go with a round).
    """
    new_prefix, new_history = list(prefix), list(history)
    if not block:
        return new_prefix, new_history
    for i, msg in enumerate(new_history):
        if msg.role == "user":
            text = f"{block}\n\n{msg.content}" if msg.content else block
            new_history[i] = msg.model_copy(update={"content": text})
            return new_prefix, new_history
    if new_prefix and new_prefix[-1].role == "user":
        last = new_prefix[-1]
        text = f"{last.content}\n\n{block}" if last.content else block
        new_prefix[-1] = last.model_copy(update={"content": text})
        return new_prefix, new_history
    return new_prefix, [Message(role="user", content=block), *new_history]


def place_notes(messages: Sequence[Message], notes: str) -> list[Message]:
    """``notes`` put in front of the last user message of ``messages`` (the prefix and history after tailoring).

    In front, so the turn still ends with what the user asked. Else, when no
    user message is left, a user message of their own in front. What comes
    before the latest user turn (the cached prefix of the next call) is left
    as it is, whatever the notes say. Place them before a user-mode summary
    (:func:`place_in_user_turn`), which then goes in front of them.
    """
    out = list(messages)
    if not notes:
        return out
    for i in range(len(out) - 1, -1, -1):
        msg = out[i]
        if msg.role == "user":
            out[i] = msg.model_copy(update={"content": f"{notes}\n\n{msg.content}" if msg.content else notes})
            return out
    return [Message(role="user", content=notes), *out]
