"""Tool-result compaction: shrink tool outputs inside messages, never drop messages.

Three passes over the projected history, all off unless ``enabled``:

- Pass 0 replaces results of ``force_clean_tool_names`` tools outside the
  protected units with a short policy placeholder (no recovery hints);
- Pass 1 replaces historical results above ``tool_result_max_tokens`` with a
  placeholder that says the call succeeded and how to recover the output;
- Pass 2 cuts the middle out of any result above
  ``oversized_tool_result_max_tokens`` (0 = off), current request included.

Ids, names and the call/result pairing are never touched, and a replacement is
used only when it is smaller than what it replaces (Pass 0 included: a result
already shorter than the policy placeholder stays as it is).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial

from projections.textcut import head_end, tail_start
from schemas import Message, ToolCall
from streams.context.cut_search import longest_fit
from streams.context.items import HistoryItem
from streams.context.notes import context_note_json, cut_marker, recall_hint
from streams.context.pairing import pair_results
from streams.rules.tokens import TokenCounter

SESSION_LOAD = "session_load"
PLACEHOLDER_MARK = "[distill:"
"""Every placeholder starts with this, so no pass rewrites another's output."""

_ARGUMENTS_OMITTED = "arguments omitted; the call completed before the summary"
ARGUMENTS_PLACEHOLDER = context_note_json(_ARGUMENTS_OMITTED)
"""The resume tail's replacement of large tool-call arguments when the event cannot be loaded back."""

_ELIDED_HISTORICAL = (
    "[distill: tool output elided] This tool call already ran and succeeded; its output was read "
    "earlier in the conversation and has been dropped from the context to save space. Use the "
    "conversation summary or the recovery details below before anything else. Do not repeat tools "
    "that change state; run a read-only tool again only if its exact output is truly needed."
)
_ELIDED_CURRENT = (
    "[distill: tool output elided] This call is part of the current task and already succeeded; its "
    "output is covered by the summary and was removed from the raw history. Use the summary or the "
    "recovery details below first, and do not repeat tools that change state."
)
_POLICY = (
    "[distill: tool output removed by policy] This tool call already completed; its output is not kept in "
    "the context. Do not call it again unless it is read-only."
)
_LOAD_HINT = (
    "To read the original output, call session_load with this event_id; a large output comes in pages: "
    "while the answer has next_content_offset, call again with content_offset set to it."
)
_NO_LOAD_HINT = (
    "The original output cannot be fetched with the tools available here. Rely on the summary, and "
    "re-run a tool only if it is read-only."
)


def _non_negative(value: int) -> int:
    return max(0, value)


@dataclass(frozen=True)
class CompactionConfig:
    """Compaction settings (the guide's defaults). Negative numbers are read as 0.

    ``skip_recent`` protects the units owning the last N history items, in
    addition to the ``keep_recent_requests`` newest completed units.
    ``keep_tool_names`` wins over ``force_clean_tool_names``.
    """

    enabled: bool = False
    keep_recent_requests: int = 1
    tool_result_max_tokens: int = 1024
    oversized_tool_result_max_tokens: int = 0
    force_clean_tool_names: frozenset[str] = field(default_factory=frozenset)
    keep_tool_names: frozenset[str] = field(default_factory=frozenset)
    skip_recent: int = 0

    def __post_init__(self) -> None:
        for name in (
            "keep_recent_requests",
            "tool_result_max_tokens",
            "oversized_tool_result_max_tokens",
            "skip_recent",
        ):
            object.__setattr__(self, name, _non_negative(getattr(self, name)))
        object.__setattr__(self, "force_clean_tool_names", frozenset(self.force_clean_tool_names))
        object.__setattr__(self, "keep_tool_names", frozenset(self.keep_tool_names))


RECOMMENDED_OVERSIZED_MAX_TOKENS = 8192


@dataclass(slots=True)
class CompactionStats:
    """What compaction changed; ``tokens_saved`` is estimated with the configured counter."""

    policy_cleaned: int = 0
    placeholders: int = 0
    truncated: int = 0
    arguments_elided: int = 0
    tokens_saved: int = 0


@dataclass(frozen=True, slots=True)
class RecoveryHint:
    """How the model can get an elided output back."""

    event_id: str | None
    tool_call_id: str | None
    tool_name: str | None
    reason: str

    @property
    def has_ids(self) -> bool:
        return bool(self.event_id or self.tool_call_id)


def historical_placeholder(hint: RecoveryHint, *, session_load: bool, current: bool = False) -> str:
    """The Pass 1 (or resume-tail, ``current=True``) replacement text.

    The recovery lines appear when the event or call id is known; the
    session_load hint only when that tool is offered and the event id is known.
    """
    text = _ELIDED_CURRENT if current else _ELIDED_HISTORICAL
    if not hint.has_ids:
        return text
    lines = [text]
    if hint.event_id:
        lines.append(f"event_id: {hint.event_id}")
    if hint.tool_call_id:
        lines.append(f"tool_call_id: {hint.tool_call_id}")
    if hint.tool_name:
        lines.append(f"tool_name: {hint.tool_name}")
    lines.append(f"reason: {hint.reason}")
    lines.append(_LOAD_HINT if session_load and hint.event_id else _NO_LOAD_HINT)
    return "\n".join(lines)


def arguments_placeholder(event_id: str | None, *, session_load: bool) -> str:
    """The resume tail's replacement of large arguments: still a JSON object, as the API expects.

    With ``session_load`` offered and the event id known it names the load
    that returns the arguments whole (``session_load`` answers an event with
    tool calls with each call's arguments).
    """
    if not (session_load and event_id):
        return ARGUMENTS_PLACEHOLDER
    return context_note_json(f"{_ARGUMENTS_OMITTED}; {recall_hint(True, event_id, many=True)}")


def policy_placeholder() -> str:
    """The Pass 0 replacement text (deliberately without recovery hints)."""
    return _POLICY


def _marker(removed: int, hint: RecoveryHint | None, session_load: bool) -> str:
    if hint is None or not hint.has_ids:
        return f"\n\n{cut_marker(removed, 'this tool result')}\n\n"
    recall = recall_hint(True, hint.event_id) if session_load else "re-run only read-only tools"
    ids = f"event_id={hint.event_id or ''}; tool_call_id={hint.tool_call_id or ''}; tool_name={hint.tool_name or ''}"
    return f"\n\n{cut_marker(removed, 'this tool result', ids, recall)}\n\n"


def _compact_marker(hint: RecoveryHint, session_load: bool) -> str:
    last = SESSION_LOAD if session_load else "compacted"
    return f"\n\n[distill: event_id={hint.event_id or ''}; tool_call_id={hint.tool_call_id or ''}; {last}]\n\n"


def truncate_middle(text: str, budget: int, hint: RecoveryHint | None = None, *, session_load: bool = False) -> str:
    """Keep the head and tail of ``text`` within ``budget`` characters, with a marker in between.

    The marker says exactly how many characters were cut (and, with a hint, where the
    full text lives). Both cuts fall on character boundaries
    (:mod:`projections.textcut`: never inside an emoji or combining sequence),
    so head and tail may hold a few characters less than the budget allows.
    When the budget cannot hold the marker plus two characters, a shorter
    marker is tried (with ids), then the marker alone (with ids) or just the
    longest head within ``budget`` characters (without).
    """
    if budget >= len(text):
        return text
    budget = max(0, budget)
    # Size the marker for the largest possible count so the exact one never overflows the budget.
    avail = budget - len(_marker(len(text), hint, session_load))
    if avail < 2 and hint is not None and hint.has_ids:
        marker = _compact_marker(hint, session_load)
        avail = budget - len(marker)
        if avail < 2:
            return marker
        head, tail = _cut_points(text, avail // 2)
        return text[:head] + marker + text[tail:]
    if avail < 2:
        return text[: head_end(text, budget)]
    head, tail = _cut_points(text, avail // 2)
    return text[:head] + _marker(tail - head, hint, session_load) + text[tail:]


def _cut_points(text: str, half: int) -> tuple[int, int]:
    """Where a head of at most ``half`` characters ends and a tail of at most ``half`` starts."""
    return head_end(text, half), tail_start(text, len(text) - half)


@dataclass(frozen=True, slots=True)
class _ToolNames:
    """The tool each result answers: by call id while no id is reused, else by result index."""

    by_id: dict[str, str]
    by_result: dict[int, str] | None = None


def _tool_names(items: Sequence[HistoryItem]) -> _ToolNames:
    """The name of the call each result answers: with call ids reused across turns, the call of its own turn
    (:func:`pair_results`), not the id's latest."""
    by_id: dict[str, str] = {}
    calls = 0
    for item in items:
        for tool_call in item.message.tool_calls:
            by_id[tool_call.id] = tool_call.function.name
            calls += 1
    if len(by_id) == calls:  # each id names one call (the common case): pairing cannot choose another
        return _ToolNames(by_id)
    by_result: dict[int, str] = {}
    for result, call in pair_results([item.message for item in items]).items():
        call_id = items[result].message.tool_call_id
        by_result[result] = next((c.function.name for c in items[call].message.tool_calls if c.id == call_id), "")
    return _ToolNames(by_id, by_result)


def _result_name(i: int, item: HistoryItem, names: _ToolNames) -> str | None:
    if item.message.name:
        return item.message.name
    if names.by_result is not None:
        return names.by_result.get(i) or None
    return names.by_id.get(item.message.tool_call_id or "")


def _is_placeholder(content: str | None) -> bool:
    return content is not None and content.startswith(PLACEHOLDER_MARK)


def protected_units(items: Sequence[HistoryItem], config: CompactionConfig, current_unit: str | None) -> set[str]:
    """The current unit, the units of the last ``skip_recent`` items, the newest completed units."""
    protected: set[str] = set()
    if current_unit:
        protected.add(current_unit)
    if config.skip_recent:
        protected.update(k for item in items[-config.skip_recent :] if (k := item.unit_key))
    completed: set[str] = set()
    for item in items:
        msg = item.message
        key = item.unit_key
        if key and msg.role == "assistant" and msg.content and not msg.tool_calls:
            completed.add(key)
    kept = 0
    seen: set[str] = set()
    for item in reversed(items):
        if kept >= config.keep_recent_requests:
            break
        key = item.unit_key
        if key is None or key in seen or key == current_unit:
            continue
        seen.add(key)
        if key in completed:
            protected.add(key)
            kept += 1
    return protected


class _Sizer:
    """Token counts of tool contents, as the counter sees a tool message."""

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter

    def tool(self, message: Message, content: str) -> int:
        return self.counter.count_message(message.model_copy(update={"content": content}))


def compact(
    items: Sequence[HistoryItem],
    config: CompactionConfig,
    counter: TokenCounter,
    *,
    current_unit: str | None,
    session_load: bool = False,
) -> tuple[list[HistoryItem], CompactionStats]:
    """Run Passes 0, 1 and 2 over ``items`` and return the rewritten list.

    ``current_unit`` is the unit key of the request being answered; without
    it Pass 1 has no notion of "historical" and is skipped. ``session_load``
    says whether that tool is offered, which decides the recovery hint.
    """
    stats = CompactionStats()
    out = list(items)
    if not config.enabled:
        return out, stats
    names = _tool_names(items)
    protected = protected_units(items, config, current_unit)
    sizer = _Sizer(counter)
    keep = config.keep_tool_names
    force = config.force_clean_tool_names - keep
    p1_max = config.tool_result_max_tokens if current_unit else 0
    p2_max = config.oversized_tool_result_max_tokens
    for i, item in enumerate(out):
        msg = item.message
        if msg.role != "tool" or not msg.tool_call_id:
            continue
        name = _result_name(i, item, names)
        if name is not None and name in keep:
            continue
        content = msg.content or ""
        unit = item.unit_key
        historical = unit not in protected if unit else False
        original = counter.count_message(msg)
        if force and name in force and (unit is None or unit not in protected):
            new = policy_placeholder()
            new_tokens = sizer.tool(msg, new)
            if new_tokens < original:
                stats.policy_cleaned += 1
                stats.tokens_saved += original - new_tokens
                out[i] = item.with_message(msg.model_copy(update={"content": new}))
            continue
        if _is_placeholder(content):
            continue
        if p1_max and historical and original > p1_max:
            hint = RecoveryHint(item.event_id, msg.tool_call_id, name, "historical_compaction")
            new = historical_placeholder(hint, session_load=session_load)
            new_tokens = sizer.tool(msg, new)
            if new_tokens < original:
                stats.placeholders += 1
                stats.tokens_saved += original - new_tokens
                out[i] = item.with_message(msg.model_copy(update={"content": new}))
                continue
        if p2_max and name != SESSION_LOAD and original > p2_max:
            hint = RecoveryHint(item.event_id, msg.tool_call_id, name, "oversized")
            load = session_load and bool(item.event_id)
            new = _fit_truncation(content, p2_max, partial(sizer.tool, msg), hint, load)
            new_tokens = sizer.tool(msg, new)
            if new_tokens < original and len(new) < len(content):
                stats.truncated += 1
                stats.tokens_saved += original - new_tokens
                out[i] = item.with_message(msg.model_copy(update={"content": new}))
    return out, stats


def _fit_truncation(
    text: str, max_tokens: int, size: Callable[[str], int], hint: RecoveryHint, session_load: bool
) -> str:
    """The longest head+tail truncation of ``text`` whose token count is at most ``max_tokens``."""
    return longest_fit(
        0, len(text) - 1, lambda k: truncate_middle(text, k, hint, session_load=session_load),
        lambda candidate: size(candidate) <= max_tokens,
    )  # fmt: skip


def compact_resume_tail(
    items: Sequence[HistoryItem],
    config: CompactionConfig,
    counter: TokenCounter,
    *,
    session_load: bool = False,
) -> tuple[list[HistoryItem], CompactionStats]:
    """Shrink oversized payloads of the resume tail (items with origin ``resume``).

    Each call's arguments and each result (unless its tool is in
    ``keep_tool_names``) is compared on its own with ``tool_result_max_tokens``;
    only the ones above it are replaced (arguments by
    :func:`arguments_placeholder`, which names the event for ``session_load``
    when it is offered). Off when compaction is off.
    """
    stats = CompactionStats()
    out = list(items)
    limit = config.tool_result_max_tokens
    if not config.enabled or not limit:
        return out, stats
    names = _tool_names(items)
    for i, item in enumerate(out):
        if item.origin != "resume":
            continue
        msg = item.message
        if msg.role == "assistant" and msg.tool_calls:
            placeholder = arguments_placeholder(item.event_id, session_load=session_load)
            calls, changed = _elide_arguments(msg.tool_calls, limit, counter, placeholder)
            if changed:
                stats.arguments_elided += changed
                out[i] = item.with_message(msg.model_copy(update={"tool_calls": calls}))
        elif msg.role == "tool":
            name = _result_name(i, item, names)
            if name in config.keep_tool_names or _is_placeholder(msg.content):
                continue
            original = counter.count_message(msg)
            if original <= limit:
                continue
            hint = RecoveryHint(item.event_id, msg.tool_call_id, name, "current_invocation_summary")
            new = historical_placeholder(hint, session_load=session_load, current=True)
            new_msg = msg.model_copy(update={"content": new})
            new_tokens = counter.count_message(new_msg)
            if new_tokens < original:
                stats.placeholders += 1
                stats.tokens_saved += original - new_tokens
                out[i] = item.with_message(new_msg)
    return out, stats


def _elide_arguments(
    calls: Iterable[ToolCall], limit: int, counter: TokenCounter, placeholder: str
) -> tuple[tuple[ToolCall, ...], int]:
    changed = 0
    result: list[ToolCall] = []
    for call in calls:
        size = counter.count_message(Message(role="user", content=call.function.arguments))
        if size > limit:
            function = call.function.model_copy(update={"arguments": placeholder})
            call = call.model_copy(update={"function": function})
            changed += 1
        result.append(call)
    return tuple(result), changed
