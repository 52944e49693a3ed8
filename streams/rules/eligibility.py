"""Which events count, and which events may trigger a summary check.

* ``partial`` (streaming chunks) and ``skip_summarization`` events are stored but
  never counted nor summarized: they do not enter the trigger state at all.
* Every other event counts toward the thresholds of the keys it belongs to.
* A user turn (a conversation round) is a message with role ``user`` that is
  not a tool result, whoever its author (:func:`is_user_turn`).
* Only completed model output may *trigger* a check: not a user message, not a
  response carrying tool calls (its round is open by definition), not an event
  with an error or without content, and not a tool result while another call of
  its round is still waiting for its result (see :func:`may_trigger`).
"""

from __future__ import annotations

from collections.abc import Collection

from schemas import Message, SessionEvent


def is_counted(event: SessionEvent) -> bool:
    """Whether the event enters the trigger state (counted and summarizable)."""
    return not event.partial and not event.skip_summarization


def has_valid_content(message: Message) -> bool:
    """Any payload: text, reasoning, tool calls or a tool result."""
    return bool(
        (message.content and message.content.strip())
        or (message.reasoning_content and message.reasoning_content.strip())
        or message.tool_calls
        or message.tool_call_id
    )


def is_user_turn_message(message: Message) -> bool:
    """A user turn: the message's role is ``user`` and it is not a tool result.

    The one rule for "a user turn" everywhere: the rounds the trigger counts
    (``F_USER``, the conversation threshold), the rounds the summarizer keeps
    back (``keep_recent_rounds``), the safe prefix ends, and the runs of the
    assembled history. The author never decides it: it is a producer's label
    (``"user"``, ``"alice"``, an agent's name), while the role is what the
    model sees. A record with author ``"user"`` and role ``"assistant"`` is
    model output; one with author ``"alice"`` and role ``"user"`` is a user turn.
    """
    return message.role == "user" and not message.tool_call_id


def error_content(event: SessionEvent) -> str | None:
    """The text an error event without content stands for: ``type: <t>, message: <m>`` (the Go rule).

    ``None`` when the event has content or no error. A prompt shows such an event
    with this text (``streams.context.history.event_message``), so the summary
    input must hold it too: once a boundary passes the event, the summary is the
    only place its error reaches a request.
    """
    if event.message.content or event.error is None:
        return None
    return event.shown_text


def shown_message(event: SessionEvent) -> Message:
    """The event's message with :func:`error_content` as its content when it has one."""
    text = error_content(event)
    return event.message if text is None else event.message.model_copy(update={"content": text})


def is_user_turn(event: SessionEvent) -> bool:
    """:func:`is_user_turn_message` of the event's message."""
    return is_user_turn_message(event.message)


def is_model_output(event: SessionEvent) -> bool:
    """Completed output that may trigger, before looking at its tool round."""
    message = event.message
    return (
        is_counted(event)
        and event.error is None
        and message.role in ("assistant", "tool")
        and not is_user_turn(event)
        and not message.tool_calls
        and has_valid_content(message)
    )


def may_trigger(event: SessionEvent, open_calls_after: Collection[str]) -> bool:
    """Whether ``event`` may trigger a check.

    ``open_calls_after`` are the tool call ids of the event's scope still waiting
    for a result once this event is applied; a tool result may trigger only
    when its round is complete (none left).
    """
    if not is_model_output(event):
        return False
    return not (event.message.tool_call_id and open_calls_after)
