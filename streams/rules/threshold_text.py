"""The text an event contributes to the token threshold (the guide's default formatters).

Custom summary formatters never change this text, so the trigger does not move
when the summary prompt does. Reasoning content is not part of the conversation
text but does count toward the token threshold, so it is returned separately.
"""

from __future__ import annotations

from schemas import Message, SessionEvent, ToolCall


def format_tool_call(call: ToolCall) -> str:
    """``[Called tool: NAME]`` or ``[Called tool: NAME with args: ARGS]``; ``""`` without a name."""
    name = call.function.name
    if not name:
        return ""
    args = call.function.arguments
    if not args or args.strip() == "{}":
        return f"[Called tool: {name}]"
    return f"[Called tool: {name} with args: {args}]"


def format_tool_result(message: Message) -> str:
    """``[NAME returned: CONTENT]`` (content stripped; ``""`` when empty; name defaults to ``tool``)."""
    content = (message.content or "").strip()
    if not content:
        return ""
    return f"[{message.name or 'tool'} returned: {content}]"


def conversation_lines(event: SessionEvent) -> str:
    """The event's lines of conversation text, ``"<author>: <text>"`` joined by newlines.

    Tool calls give one line each; a tool result gives its result line and no
    content line; otherwise the stripped content, if any.
    """
    message = event.message
    author = event.author or "unknown"
    lines: list[str] = []
    for call in message.tool_calls:
        text = format_tool_call(call)
        if text:
            lines.append(f"{author}: {text}")
    if message.tool_call_id:
        text = format_tool_result(message)
        if text:
            lines.append(f"{author}: {text}")
    else:
        content = (message.content or "").strip()
        if content:
            lines.append(f"{author}: {content}")
    return "\n".join(lines)


def reasoning_text(event: SessionEvent) -> str:
    """The event's reasoning content, stripped."""
    return (event.message.reasoning_content or "").strip()


def conversation_length(event: SessionEvent) -> int:
    """``len(conversation_lines(event))`` without building the text.

    Length-only counters (the simple counter) need nothing else, and a long tool
    result would otherwise be copied twice per event just to be measured.
    """
    message = event.message
    prefix = len(event.author or "unknown") + 2  # "<author>: "
    total = 0
    lines = 0
    for call in message.tool_calls:
        size = len(format_tool_call(call))
        if size:
            total += prefix + size
            lines += 1
    content = message.content
    if content:
        size = len(content.strip())
        if size:
            if message.tool_call_id:
                size += len(message.name or "tool") + 13  # "[" NAME " returned: " CONTENT "]"
            total += prefix + size
            lines += 1
    return total + lines - 1 if lines else 0
