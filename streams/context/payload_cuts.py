"""Cutting tool-call arguments and message texts to fit a request: before any round is dropped.

Fitting (:mod:`.fitting`) cuts, at each token threshold it tries, the tool
results (Pass 2 of :mod:`.compaction`), the arguments of tool calls and the
texts of user and assistant messages above it together. Every cut keeps the
head and the tail (on character boundaries, :mod:`projections.textcut`) and puts
a marker in the middle naming the event, whose payload stays stored whole:
``session_load(event_id=…)`` returns a message's text and a call's arguments,
paged. Only stored events are cut (an item without an event id has nothing to
load back), and the current user message keeps at least
``CURRENT_MESSAGE_MIN_TOKENS`` — never only a marker.

Arguments stay a JSON object the API accepts: the longest string values inside
them are cut (keys and structure kept); arguments whose bulk is not in strings
(or that are not JSON) become ``{"_distill_context_note": marker, "head": …, "tail": …}``
(the key of every note that replaces arguments, :data:`.notes.CONTEXT_NOTE_KEY`).
Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from projections.textcut import head_and_tail
from schemas import Message, ToolCall
from schemas.text import utf8_text
from streams.context.compaction import PLACEHOLDER_MARK
from streams.context.cut_search import longest_fit
from streams.context.items import HistoryItem
from streams.context.notes import context_note_json, cut_marker, recall_hint
from streams.rules.tokens import TokenCounter

CURRENT_MESSAGE_MIN_TOKENS = 256
"""The current user message is never cut below this many tokens (what the model is asked to answer)."""
CURRENT_MESSAGE_MIN_CHARS = 64
"""...and keeps at least this many characters of its text, whatever the counter says."""

Marker = Callable[[int], str]
"""The marker for a cut that removed ``n`` characters."""


@dataclass(frozen=True)
class PayloadCuts:
    """Token thresholds above which arguments and message texts are cut (0: not cut)."""

    arguments_max_tokens: int = 0
    message_max_tokens: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "arguments_max_tokens", max(0, self.arguments_max_tokens))
        object.__setattr__(self, "message_max_tokens", max(0, self.message_max_tokens))

    @property
    def any(self) -> bool:
        return bool(self.arguments_max_tokens or self.message_max_tokens)


@dataclass(slots=True)
class PayloadCutStats:
    """What was cut: calls whose arguments and messages whose text, the events, tokens saved."""

    arguments: int = 0
    messages: int = 0
    tokens_saved: int = 0
    event_ids: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class PayloadPeaks:
    """The largest payload of each kind a request holds before tailoring, in tokens (what fitting could cut).

    Tool results count as their message; arguments one call's; message texts
    their message (arguments included), of stored user and assistant messages.
    """

    tool_result: int = 0
    arguments: int = 0
    message: int = 0


def payload_peaks(items: Sequence[HistoryItem], costs: Sequence[int], counter: TokenCounter) -> PayloadPeaks:
    """The :class:`PayloadPeaks` of ``items``, whose messages count ``costs`` tokens."""
    tool_result = arguments = message = 0
    for item, cost in zip(items, costs, strict=True):
        msg = item.message
        if msg.role == "tool":
            tool_result = max(tool_result, cost)
        elif item.event_id is not None and msg.role in ("user", "assistant"):
            if msg.content:
                message = max(message, cost)
            for call in msg.tool_calls:
                arguments = max(arguments, counter.count_text(call.function.arguments))
    return PayloadPeaks(tool_result, arguments, message)


def message_marker(event_id: str, *, session_load: bool) -> Marker:
    """The marker of a message text cut in the middle."""
    recall = recall_hint(session_load, event_id)
    return lambda n: f"\n\n{cut_marker(n, 'this message', f'event_id={event_id}', recall)}\n\n"


def arguments_marker(event_id: str, call_id: str, *, session_load: bool) -> Marker:
    """The marker of tool-call arguments cut in the middle (inside a string value, or as the note)."""
    ids, recall = f"event_id={event_id}; tool_call_id={call_id}", recall_hint(session_load, event_id)
    return lambda n: f" {cut_marker(n, 'these tool-call arguments', ids, recall)} "


def cut_middle(text: str, keep: int, marker: Marker) -> str:
    """``text`` with at most ``keep`` of its characters (head and tail) and ``marker`` in between."""
    if keep >= len(text):
        return text
    head, tail = head_and_tail(text, keep)
    return head + marker(len(text) - len(head) - len(tail)) + tail


def cut_text(text: str, fits: Callable[[str], bool], marker: Marker, *, min_keep: int = 0) -> str:
    """The longest head + tail cut of ``text`` that ``fits`` (keeping at least ``min_keep`` characters)."""
    floor = min(max(0, min_keep), len(text))
    return longest_fit(floor, len(text) - 1, lambda k: cut_middle(text, k, marker), fits)


def _cap_strings(value: Any, keep: int, marker: Marker) -> Any:
    if isinstance(value, str):
        return cut_middle(value, keep, marker)
    if isinstance(value, list):
        return [_cap_strings(v, keep, marker) for v in value]
    if isinstance(value, dict):
        return {k: _cap_strings(v, keep, marker) for k, v in value.items()}
    return value


def _longest_string(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list):
        return max((_longest_string(v) for v in value), default=0)
    if isinstance(value, dict):
        return max((_longest_string(v) for v in value.values()), default=0)
    return 0


def _dumps(value: Any) -> str:
    # A lone surrogate can only come from a string's escape (arguments are UTF-8 text): written raw, no client
    # can encode the request; escaped again (utf8_text writes the JSON escape), the value reads the same.
    return utf8_text(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def cut_arguments(arguments: str, fits: Callable[[str], bool], marker: Marker) -> str:
    """``arguments`` cut to fit, still a JSON object (see the module docstring)."""
    try:
        value = json.loads(arguments)
    except ValueError:
        value = None
    if isinstance(value, dict | list):
        longest = _longest_string(value)
        capped = longest_fit(0, longest - 1, lambda k: _dumps(_cap_strings(value, k, marker)), fits)
        if fits(capped):
            return capped

    def wrapped(keep: int) -> str:
        head, tail = head_and_tail(arguments, keep)
        return context_note_json(marker(len(arguments) - len(head) - len(tail)).strip(), head=head, tail=tail)

    return longest_fit(0, len(arguments) - 1, wrapped, fits)


def cut_payloads(
    items: Sequence[HistoryItem],
    cuts: PayloadCuts,
    counter: TokenCounter,
    *,
    current_event_id: str | None,
    session_load: bool = False,
) -> tuple[list[HistoryItem], PayloadCutStats]:
    """Cut the arguments and message texts above ``cuts``' thresholds; everything else is left as it is."""
    stats = PayloadCutStats()
    out = list(items)
    if not cuts.any:
        return out, stats
    for i, item in enumerate(out):
        if item.event_id is None or item.message.role not in ("user", "assistant"):
            continue
        before = counter.count_message(item.message)
        msg = _cut_calls(item.message, item.event_id, cuts.arguments_max_tokens, counter, session_load, stats)
        limit = cuts.message_max_tokens
        if limit and item.event_id == current_event_id:
            limit = max(limit, CURRENT_MESSAGE_MIN_TOKENS)
        msg = _cut_content(msg, item.event_id, limit, counter, session_load, current=item.event_id == current_event_id,
                           stats=stats)  # fmt: skip
        if msg is not item.message:
            stats.tokens_saved += before - counter.count_message(msg)
            stats.event_ids.append(item.event_id)
            out[i] = item.with_message(msg)
    return out, stats


def _cut_calls(
    msg: Message, event_id: str, limit: int, counter: TokenCounter, session_load: bool, stats: PayloadCutStats
) -> Message:
    if not limit or not msg.tool_calls:
        return msg
    calls: list[ToolCall] = []
    for call in msg.tool_calls:
        arguments = call.function.arguments
        size = counter.count_text(arguments)
        if size > limit:
            new = cut_arguments(arguments, lambda s: counter.count_text(s) <= limit,
                                arguments_marker(event_id, call.id, session_load=session_load))  # fmt: skip
            if counter.count_text(new) < size:
                call = call.model_copy(update={"function": call.function.model_copy(update={"arguments": new})})
                stats.arguments += 1
        calls.append(call)
    changed = any(a is not b for a, b in zip(calls, msg.tool_calls, strict=True))
    return msg.model_copy(update={"tool_calls": tuple(calls)}) if changed else msg


def _cut_content(
    msg: Message, event_id: str, limit: int, counter: TokenCounter, session_load: bool, *, current: bool,
    stats: PayloadCutStats,
) -> Message:  # fmt: skip
    content = msg.content
    if not limit or not content or content.startswith(PLACEHOLDER_MARK):
        return msg
    original = counter.count_message(msg)
    if original <= limit:
        return msg

    def fits(text: str) -> bool:
        return counter.count_message(msg.model_copy(update={"content": text})) <= limit

    new = cut_text(content, fits, message_marker(event_id, session_load=session_load),
                   min_keep=CURRENT_MESSAGE_MIN_CHARS if current else 0)  # fmt: skip
    if len(new) >= len(content) or counter.count_message(msg.model_copy(update={"content": new})) >= original:
        return msg
    stats.messages += 1
    return msg.model_copy(update={"content": new})
