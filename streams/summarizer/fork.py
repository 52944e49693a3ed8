"""Cache-safe forking: summarize with a clone of the caller's own model request.

The clone keeps the caller's prefix byte for byte (messages, tools,
generation settings) so a provider's prompt cache can serve it; only the
summary instruction is appended. Fitting edits the clone, never the caller's
request, and never drops a conversation turn.

A fork is used only when it holds every event of its pass, payload included,
and the previous summary (:func:`fork_for_pass`): the caller's request may be
a tailored view of the session, and an event the fork does not hold would be
covered by a summary that never saw it.
"""

from __future__ import annotations

import copy
import json
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

from schemas import SessionEvent
from streams.errors import PermanentError
from streams.rules.eligibility import shown_message
from streams.rules.filter_keys import FULL_SESSION
from streams.rules.targets import skips_cascade_for_fork
from streams.rules.tokens import TokenCounter
from streams.summarizer.conversation import ConversationFormatter, is_tool_result
from streams.summarizer.request import ChatRequest, as_message, count_request

_DROPPED_PARAMS = ("stream", "stream_options", "response_format", "model", "n")
TOOL_ARGS_OMITTED = json.dumps({"_distill_note": "tool arguments left out to fit the summary request"})


def tool_result_omitted(name: str, call_id: str) -> str:
    """The text that stands in for a tool result left out of a fork."""
    return (
        f"[Tool result left out to fit the summary request; tool_name={json.dumps(name)}, "
        f"tool_call_id={json.dumps(call_id)}. The call had completed.]"
    )


def fork_request(parent: Mapping[str, Any], fork_prompt: str) -> ChatRequest:
    """Clone ``parent`` (a chat-completions request body) and append ``fork_prompt``.

    Streaming and structured output are turned off; tools are kept because
    they are part of the cached prefix. A parent with no conversation
    content is refused.
    """
    body = copy.deepcopy(dict(parent))
    messages = body.pop("messages", None)
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise PermanentError("cache-safe summary request has no messages list")
    if not any(_has_conversation(m) for m in messages):
        raise PermanentError("cache-safe summary request has no conversation content")
    tools = body.pop("tools", None) or []
    for key in _DROPPED_PARAMS:
        body.pop(key, None)
    body["stream"] = False
    messages.append({"role": "user", "content": fork_prompt})
    return ChatRequest(messages=messages, tools=list(tools), params=body)


def _has_conversation(message: Mapping[str, Any]) -> bool:
    if message.get("role") in ("system", "developer"):
        return False
    return bool(message.get("content") or message.get("tool_calls"))


def fit_fork(request: ChatRequest, budget: int, counter: TokenCounter) -> ChatRequest | None:
    """A copy of ``request`` within ``budget``, or ``None`` when no edit is enough.

    First the tool schemas go; then the largest tool payloads (results, then
    call arguments, by tokens saved) are replaced by explicit markers, one at
    a time, until the request fits.
    """
    if count_request(request, counter) <= budget:
        return request
    fitted = request.clone()
    fitted.tools = []
    fitted.params.pop("tool_choice", None)
    fitted.params.pop("parallel_tool_calls", None)
    if count_request(fitted, counter) <= budget:
        return fitted
    for index, replacement in _payload_candidates(fitted, counter):
        fitted.messages[index] = replacement
        if count_request(fitted, counter) <= budget:
            return fitted
    return None


def _payload_candidates(request: ChatRequest, counter: TokenCounter) -> list[tuple[int, dict[str, Any]]]:
    names: dict[str, str] = {}
    for message in request.messages:
        for call in message.get("tool_calls") or []:
            names[str(call.get("id", ""))] = str((call.get("function") or {}).get("name", ""))
    scored: list[tuple[int, int, dict[str, Any]]] = []
    last = len(request.messages) - 1
    for index, message in enumerate(request.messages[:last]):
        slim = _slimmed(message, names)
        if slim is None:
            continue
        saved = counter.count_message(as_message(message)) - counter.count_message(as_message(slim))
        if saved > 0:
            scored.append((saved, index, slim))
    scored.sort(key=lambda item: -item[0])
    return [(index, slim) for _, index, slim in scored]


def _slimmed(message: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, Any] | None:
    if message.get("role") == "tool":
        call_id = str(message.get("tool_call_id", ""))
        slim = {k: v for k, v in message.items() if k not in ("reasoning_content",)}
        slim["content"] = tool_result_omitted(names.get(call_id, str(message.get("name") or "tool")), call_id)
        return slim
    calls = message.get("tool_calls")
    if message.get("role") == "assistant" and calls:
        new_calls = []
        for call in calls:
            function = dict(call.get("function") or {})
            if function.get("arguments"):
                function["arguments"] = TOOL_ARGS_OMITTED
            new_calls.append({**call, "function": function})
        return {**message, "tool_calls": new_calls}
    return None


def skip_cascade_after_fork(trigger_filter_key: str, fork_used: bool) -> bool:
    """A branch pass that forked the caller's request skips the cascaded full-session target.

    The caller's request shows the branch's view, so it cannot stand in for
    the whole session; a full-session summary needs its own trigger. The
    planner applies the same rule (:func:`streams.rules.targets.skips_cascade_for_fork`)
    when a ``summarize_sync`` command carries a model request.
    """
    return skips_cascade_for_fork(trigger_filter_key, FULL_SESSION, fork_used)


def _normal(text: str) -> str:
    """``text`` compared as the model reads it: NFC, whitespace runs as one space."""
    return " ".join(unicodedata.normalize("NFC", text).split())


def _message_text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        # The same flattening as the event schema: the text parts, joined.
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping) and p.get("type") == "text")
    return ""


def fork_misses(
    messages: Sequence[Mapping[str, Any]],
    events: Sequence[SessionEvent],
    previous_summary: str,
    formatter: ConversationFormatter,
) -> str | None:
    """Why ``messages`` (a fork's conversation, the fork prompt excluded) do not hold the pass; ``None`` when they do.

    An event is held only when the fork carries what it says, not just its ids
    (see :func:`_missing`); a non-empty previous summary must appear inside one
    message (the caller's injected summary).
    """
    missing = _missing(messages, events, formatter)
    if missing:
        return f"the caller's request lacks {_events_named(missing, events)}"
    summary = _normal(previous_summary)
    if summary and not any(summary in _normal(_message_text(m)) for m in messages):
        return "the caller's request lacks the previous summary"
    return None


def fork_for_pass(
    parent: Mapping[str, Any],
    fork_prompt: str,
    events: Sequence[SessionEvent],
    previous_summary: str,
    budget: int,
    counter: TokenCounter,
    formatter: ConversationFormatter,
) -> tuple[ChatRequest | None, str | None]:
    """The caller's request forked for a pass within ``budget``, or ``None`` and why it is declined.

    Declined when the caller's request does not hold the pass (:func:`fork_misses`),
    when no fit of it is within ``budget``, and when fitting it had to replace a
    payload of one of the pass's events by a marker: a fork carries the pass's
    payloads whole. (A standalone request cuts such a payload head + tail, with a
    marker naming the event for ``session_load``, and reports the cut.) Payloads of
    messages outside the pass — turns before the boundary, which the previous
    summary holds — may be left out.
    """
    whole = fork_request(parent, fork_prompt)
    declined = fork_misses(whole.messages[:-1], events, previous_summary, formatter)
    if declined:
        return None, declined
    fitted = fit_fork(whole, budget, counter)
    if fitted is None:
        return None, f"the caller's request does not fit the input budget ({budget} tokens)"
    slimmed = _missing(fitted.messages[:-1], events, formatter) if fitted is not whole else []
    if slimmed:
        return None, (
            f"the caller's request fits the input budget ({budget} tokens) only with payloads left out "
            f"of {_events_named(slimmed, events)}"
        )
    return fitted, None


def _missing(
    messages: Sequence[Mapping[str, Any]], events: Sequence[SessionEvent], formatter: ConversationFormatter
) -> list[str]:
    """The ids of the events with summary text that ``messages`` do not carry, in the events' order.

    A tool result is carried by a message answering its ``tool_call_id`` whose
    text contains the result's; a tool call by a call with its id, name and
    arguments (compared as JSON when both parse); text content (plain or
    list-of-parts) by a message of its own (:func:`_claim`): one whose text is
    the content, or begins or ends with it at a word break (a summary or a note
    the request put in front of a user turn). Texts are compared after NFC
    normalization and whitespace folding. A payload replaced by a marker
    (:func:`fit_fork`, or the caller's own elision) is not carried.
    """
    texts = [_normal(_message_text(m)) for m in messages]
    results: dict[str, list[str]] = {}
    calls: dict[str, tuple[str, str]] = {}
    for raw, text in zip(messages, texts, strict=True):
        if raw.get("tool_call_id"):
            results.setdefault(str(raw["tool_call_id"]), []).append(text)
        for call in raw.get("tool_calls") or []:
            function = call.get("function") if isinstance(call, Mapping) else None
            if isinstance(function, Mapping):
                calls[str(call.get("id"))] = (str(function.get("name", "")), _arguments(function.get("arguments")))
    wanted: list[tuple[str, str]] = []
    missing: list[str] = []
    for event in events:
        if not formatter.event_text(event):
            continue
        message = shown_message(event)  # an error event as the caller's request shows it
        content = _normal(message.content or "")
        if is_tool_result(message) and message.tool_call_id:
            if not any(content in text for text in results.get(message.tool_call_id, ())):
                missing.append(event.event_id)
            continue
        if any(calls.get(c.id) != (c.function.name, _arguments(c.function.arguments)) for c in message.tool_calls):
            missing.append(event.event_id)
            continue
        if content:
            wanted.append((content, event.event_id))
    claimable = [None if raw.get("tool_call_id") else text for raw, text in zip(messages, texts, strict=True)]
    missing += _claim(wanted, claimable)
    order = {e.event_id: i for i, e in enumerate(events)}
    return sorted(missing, key=lambda eid: order.get(eid, 0))


def _claim(wanted: Sequence[tuple[str, str]], texts: list[str | None]) -> list[str]:
    """The event ids of ``wanted`` (content, event id) that no message of ``texts`` carries, one message each.

    A message carries one event: a short text ("yes", "好") is not held by a longer message that
    merely contains it, nor twice by one message. Longer contents claim first (they fit fewer
    messages), a message equal to the content before one that only begins or ends with it at a word
    break (the request's summary or notes in front of a user turn). ``None`` texts are not claimable
    (tool results, matched by their call id). A pass whose text a claim misses is sent standalone.
    """
    free = list(texts)
    equal: dict[str, list[int]] = {}  # the usual case, one lookup: a message that is its event's text
    for i, text in enumerate(texts):
        if text is not None:
            equal.setdefault(text, []).append(i)
    missing = []
    for content, event_id in sorted(wanted, key=lambda w: -len(w[0])):
        same = equal.get(content)
        found = same.pop(0) if same else None
        if found is None:
            found = next((i for i, t in enumerate(free) if t is not None and _holds(t, content)), None)
        if found is None:
            missing.append(event_id)
        else:
            free[found] = None
            if (text := texts[found]) is not None and found in equal.get(text, ()):
                equal[text].remove(found)
    return missing


def _holds(text: str, content: str) -> bool:
    """``text`` is ``content`` with something put before or after it, at a word break (normalized: one space)."""
    return text.startswith(content + " ") or text.endswith(" " + content)


def _arguments(raw: object) -> str:
    """Tool-call arguments as compared: canonical JSON when they parse, else normalized text."""
    text = unicodedata.normalize("NFC", raw if isinstance(raw, str) else "")
    try:
        return json.dumps(json.loads(text), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    except ValueError:
        return _normal(text)


def _events_named(missing: Sequence[str], events: Sequence[SessionEvent]) -> str:
    shown = ", ".join(missing[:5]) + (", ..." if len(missing) > 5 else "")
    return f"{len(missing)} of the pass's {len(events)} events ({shown})"
