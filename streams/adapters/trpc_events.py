"""trpc-agent-py ``Event``\\ s ⇄ distill session events (the ``trpc`` extra).

One trpc event gives:

- a head event carrying its text parts (``content``; code a code executor ran and
  its output too, fenced as trpc shows them to the model, and the images and files
  it attaches named by kind, type, size and name), thought parts
  (``reasoning_content``) and function calls (``tool_calls``): role ``user``
  for the user's events, ``assistant`` otherwise, ``system`` when it has no
  content at all (state or transfer actions only: never summarized or shown);
- one ``tool`` event per function response (distill pairs every result with
  its call), ids ``<event id>``, ``<event id>~1``, ...

The filter key (:func:`filter_key_of`) is the event's own ``filter_key`` when
trpc set one (its graph writer does; ``/``-separated, as distill's), else its
``branch``: the root agent's events (branch ``"root"``) and the user's (no
branch) belong to the whole session — ``""``, or the service's key — and a
sub-agent's branch ``root.research.web`` is the key ``<app>/research/web``.

``partial``, ``author``, ``invocation_id``, ``request_id`` (else the invocation
id: one ``Runner.run_async`` is one top-level request), the error and the token
usage map onto their distill fields. ``actions.skip_summarization`` maps onto
distill's flag (the producer need not remember the event: never summarized, hidden
once a boundary passes it) on an event without a function response, as the Python
guide uses it ("Debug information"); not on a function response, where trpc sets it
on the tool's response that is the turn's answer (``AgentTool(...,
skip_summarization=True)``: no model call rephrases it), which must be remembered.
It stays in the native record either way. The
whole event rides in the head's ``native`` block (see :mod:`.native`), so
:func:`to_trpc_events` gives every event back exactly — ids, float timestamp,
parts, actions, flags, metadata.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from trpc_agent_sdk.events import Event
from trpc_agent_sdk.types import Content, FunctionCall, FunctionResponse, Part, State

from schemas import Message, SessionEvent, SessionKey, ToolCall
from schemas.events import FunctionCall as ChatFunction
from schemas.text import utf8_record
from streams.adapters.attachments import attachment_text, kind_of
from streams.adapters.native import PART_OF_FIELD, Clock, Path, native_block, native_of, part_of, restore_record
from streams.context.history import calls_alone

EVENT_FORMAT = "trpc-agent-py/event"
STATE_FIELD = "session_state"
"""The session state after this event (on each of its pieces): ``get_session`` reads it back."""


def call_id(call: FunctionCall | FunctionResponse, event_id: str, index: int) -> str:
    """The call id distill pairs by (trpc leaves it empty for models that give none)."""
    return call.id or f"{event_id}:{call.name or 'call'}:{index}"


def _arguments(call: FunctionCall) -> str:
    return json.dumps(call.args or {}, ensure_ascii=False, sort_keys=False)


def _response_text(response: FunctionResponse) -> str:
    value = response.response
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


BRANCH_SEPARATOR = "."


def filter_key_of(event: Event, app_name: str, base: str = "") -> str:
    """The distill filter key of a trpc event (see the module docstring).

    ``base`` is the key of the root agent's events (a service scoped to a
    branch); a sub-agent's key is below it, or below ``app_name`` when it is
    ``""``. trpc writes a parallel sub-agent's name twice (``root.root.a.a``):
    a segment repeating the one before it counts once.
    """
    if event.filter_key:
        return str(event.filter_key)
    path: list[str] = []
    for segment in (event.branch or "").split(BRANCH_SEPARATOR):
        if segment and (not path or path[-1] != segment):
            path.append(segment)
    below_root = path[1:]
    if not below_root:
        return base
    return "/".join([base or app_name, *below_root])


CODE_FENCE = ("```python\n", "\n```")
"""How trpc shows the model an ``executable_code`` part (its code executors' last code delimiter)."""
OUTPUT_FENCE = ("```tool_output\n", "\n```")
"""How trpc shows the model a ``code_execution_result`` part (its execution result delimiter)."""


def _shown_text(part: Part) -> str | None:
    """The text of a part as trpc's request shows it to the model (``None``: no text, or a thought).

    A text part as it is; the code a code executor ran and its output (``executable_code`` /
    ``code_execution_result`` parts) fenced as trpc renders them: the model reads them, so a summary
    that covers their event must too. An image or file the model saw (``inline_data`` / ``file_data``)
    is named (:mod:`.attachments`: kind, MIME type, size, display name, URI), its bytes never copied.
    """
    if part.thought:
        return None
    if part.text is not None:
        return str(part.text)
    if part.executable_code is not None:
        return f"{CODE_FENCE[0]}{part.executable_code.code or ''}{CODE_FENCE[1]}"
    if part.code_execution_result is not None:
        return f"{OUTPUT_FENCE[0]}{part.code_execution_result.output or ''}{OUTPUT_FENCE[1]}"
    if part.inline_data is not None:
        blob = part.inline_data
        size = len(blob.data) if blob.data is not None else None
        return attachment_text(kind_of(blob.mime_type), blob.mime_type, size, blob.display_name)
    if part.file_data is not None:
        ref = part.file_data
        return attachment_text(kind_of(ref.mime_type), ref.mime_type, None, ref.display_name, ref.file_uri)
    return None


def _head_message(event: Event, parts: Sequence[Part]) -> tuple[Message, Path | None]:
    texts = [(i, t) for i, p in enumerate(parts) if (t := _shown_text(p)) is not None]
    thoughts = [p.text for p in parts if p.text is not None and p.thought]
    calls = [p.function_call for p in parts if p.function_call is not None]
    content = "".join(t for _, t in texts) if texts else None
    single = len(texts) == 1 and parts[texts[0][0]].text is not None  # one text part: stored once, at its path
    path: Path | None = ("content", "parts", texts[0][0], "text") if single else None
    role = "user" if event.author == "user" else "assistant"
    if event.content is None:
        role = "system"
    message = Message(
        role=role, content=content, reasoning_content="".join(thoughts) if thoughts else None,
        tool_calls=tuple(
            ToolCall(id=call_id(c, event.id, i), function=ChatFunction(name=c.name or "", arguments=_arguments(c)))
            for i, c in enumerate(calls)
        ),
    )  # fmt: skip
    return message, path


def _usage(event: Event) -> dict[str, int] | None:
    usage = event.usage_metadata
    if usage is None:
        return None
    return {
        "prompt_tokens": usage.prompt_token_count or 0,
        "completion_tokens": usage.candidates_token_count or 0,
        "total_tokens": usage.total_token_count or 0,
    }


def to_session_events(
    event: Event, key: SessionKey, clock: Clock, *, state: Mapping[str, Any] | None = None, base_key: str = ""
) -> list[SessionEvent]:
    """The distill events of ``event`` (head first, then one per function response), under its filter key
    (:func:`filter_key_of` with ``base_key``)."""
    parts = list(event.content.parts or []) if event.content is not None else []
    record = event.model_dump(mode="json", exclude_none=True)
    head, path = _head_message(event, parts)
    responses = [p.function_response for p in parts if p.function_response is not None]
    at = clock.next(datetime.fromtimestamp(event.timestamp, UTC))
    common: dict[str, Any] = {
        "app_name": key.app_name, "user_id": key.user_id, "session_id": key.session_id,
        "invocation_id": event.invocation_id, "request_id": event.request_id or event.invocation_id,
        "author": event.author or "unknown", "partial": bool(event.partial),
        "filter_key": filter_key_of(event, key.app_name, base_key),
        # A function response with the flag is the turn's answer (see the module): summarized.
        "skip_summarization": bool(event.actions.skip_summarization) and not responses,
    }  # fmt: skip
    extra: dict[str, Any] = {}
    if event.error_code or event.error_message:
        extra["error"] = {"type": event.error_code, "message": event.error_message}
    usage = _usage(event)
    if usage is not None:
        extra["usage"] = usage
    messages: list[tuple[Message, Path | None]] = []
    if head.content is not None or head.tool_calls or head.reasoning_content or not responses:
        messages.append((head, path))
    for i, response in enumerate(responses):
        tool = Message(role="tool", tool_call_id=call_id(response, event.id, i), name=response.name,
                       content=_response_text(response))  # fmt: skip
        messages.append((tool, None))
    out = []
    for n, (message, text_path) in enumerate(messages):
        fields: dict[str, Any] = {**common, "message": message, "timestamp": at if n == 0 else clock.next(at)}
        if state is not None:  # on every piece: a summary boundary may fall on any of them
            fields[STATE_FIELD] = json.loads(json.dumps(dict(state), default=str))
        if n == 0:
            fields |= extra
            fields["event_id"] = event.id
            fields["native"] = native_block(EVENT_FORMAT, record, text_path, message.content)
        else:
            fields["event_id"] = f"{event.id}~{n}"
            fields[PART_OF_FIELD] = event.id
        out.append(utf8_record(SessionEvent.model_validate(fields)))  # a lone surrogate could not be published
    return out


def to_trpc_events(
    events: Iterable[SessionEvent], calls_only: Mapping[str, Collection[str]] | None = None
) -> list[Event]:
    """trpc events back from distill events (in order; split events joined again).

    A piece whose head is not among ``events`` (a summary boundary between the
    pieces of one event) and events of other producers are rebuilt from their
    chat message. ``calls_only`` (``SessionView.calls_only``): covered events
    shown for some of their calls only (their results lie after the boundary),
    which give an event of those ``function_call`` parts alone — the record's
    own parts (ids, thought signatures) when it has one; its other pieces in
    ``events`` are then rebuilt on their own.
    """
    events = list(events)
    only = calls_only or {}
    heads = {e.event_id for e in events if native_of(e, EVENT_FORMAT) is not None and e.event_id not in only}
    out: list[Event] = []
    for event in events:
        block = native_of(event, EVENT_FORMAT)
        ids = only.get(event.event_id)
        if block is not None:
            trpc_event = Event.model_validate(restore_record(block, event.message.content))
            out.append(trpc_event if ids is None else _calls_alone(trpc_event, set(ids)))
        elif part_of(event) in heads:
            continue
        elif ids is not None:
            out.append(from_message(event.model_copy(update={"message": calls_alone(event.message, ids)})))
        else:
            out.append(from_message(event))
    return out


def _calls_alone(event: Event, ids: set[str]) -> Event:
    """``event`` with only its ``function_call`` parts whose call ids are in ``ids`` (:func:`call_id`)."""
    parts = list(event.content.parts or []) if event.content is not None else []
    kept: list[Part] = []
    n = 0
    for part in parts:
        if part.function_call is None:
            continue
        if call_id(part.function_call, event.id, n) in ids:
            kept.append(part)
        n += 1
    content = event.content.model_copy(update={"parts": kept}) if event.content is not None else None
    return event.model_copy(update={"content": content})


def from_message(event: SessionEvent) -> Event:
    """A trpc event built from a distill event's chat message (no native record)."""
    msg = event.message
    parts: list[Part] = []
    if msg.reasoning_content:
        parts.append(Part(text=msg.reasoning_content, thought=True))
    if msg.role == "tool":
        try:
            response: Any = json.loads(msg.content or "null")
        except json.JSONDecodeError:
            response = None
        if not isinstance(response, dict):
            response = {"result": msg.content}
        parts.append(Part(function_response=FunctionResponse(id=msg.tool_call_id, name=msg.name, response=response)))
    elif msg.content:
        parts.append(Part(text=msg.content))
    for call in msg.tool_calls:
        try:
            args = json.loads(call.function.arguments or "{}")
        except json.JSONDecodeError:
            args = {"arguments": call.function.arguments}
        parts.append(Part(function_call=FunctionCall(id=call.id, name=call.function.name, args=args)))
    role = "user" if msg.role in ("user", "tool") else "model"
    return Event(
        id=event.event_id, invocation_id=event.invocation_id, author=event.author, request_id=event.request_id or None,
        timestamp=event.timestamp.timestamp(), partial=event.partial or None,
        content=Content(role=role, parts=parts) if parts else None,
    )  # fmt: skip


def persisted_state(state: Mapping[str, Any]) -> dict[str, Any]:
    """``state`` without its ``temp:`` keys: trpc keeps those in the running session only, never stored."""
    return {k: v for k, v in state.items() if not k.startswith(State.TEMP_PREFIX)}


def state_of(events: Sequence[SessionEvent]) -> dict[str, Any] | None:
    """The session state recorded on the newest head event that carries one."""
    for event in reversed(events):
        value = (event.model_extra or {}).get(STATE_FIELD)
        if isinstance(value, dict):
            return dict(value)
    return None
