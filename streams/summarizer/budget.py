"""Input budgets, previous-summary truncation and safe prefixes of a delta.

No event after the boundary is ever dropped: when the delta does not fit,
its payloads are cut head + tail with a ``session_load`` marker
(:mod:`streams.summarizer.payloads`) and only a complete prefix of it may be
summarized, the rest waiting for the next pass. The previous summary is cut
(head and tail kept) only when it alone does not fit (see
:mod:`streams.summarizer.plan`).
"""

from __future__ import annotations

from collections.abc import Sequence

from projections.textcut import head_and_tail, tail_start
from schemas import SessionEvent
from streams.rules.context_windows import lookup_context_window
from streams.rules.eligibility import is_user_turn
from streams.summarizer.conversation import ConversationFormatter, is_tool_result

DEFAULT_CONTEXT_WINDOW = 8192
BUDGET_RATIO = 0.7
TRUNCATION_MARKER = "\n[... part of the previous summary left out to fit the summary request ...]\n"


def resolve_context_window(configured: int | None, model: str | None, backend: int | None = None) -> int:
    """Settings first, then what the backend knows, then the registry, else 8192."""
    for window in (configured, backend):
        if window is not None and window > 0:
            return window
    # Only now: a registry lookup scans every known name for a prefix (per job, for every model it lacks).
    window = lookup_context_window(model)
    return window if window is not None and window > 0 else DEFAULT_CONTEXT_WINDOW


def input_budget(context_window: int, provider_budget: int | None = None) -> int:
    """``min(provider budget, 70 % of the window)``, at least 1 token."""
    budget = int(context_window * BUDGET_RATIO)
    if provider_budget is not None and 0 < provider_budget < budget:
        budget = provider_budget
    return max(budget, 1)


def halve(budget: int) -> int:
    """The budget of the one retry after a context-length error or an empty answer."""
    return max(int(budget * 0.5), 1)


def truncate_middle(text: str, keep: int) -> str:
    """Keep at most ``keep`` characters: about ``ceil(keep/2)`` from the head, the rest from the tail.

    Cuts fall on character boundaries (:mod:`projections.textcut`), so
    the pieces may be a few characters shorter; the head keeps at least one
    character when ``keep >= 1``.
    """
    if keep >= len(text):
        return text
    if keep <= 0:
        return ""
    head, tail = head_and_tail(text, keep)
    if not head:
        head = text[: tail_start(text, 1)]
    return head + TRUNCATION_MARKER + tail


def safe_prefix_ends(events: Sequence[SessionEvent], formatter: ConversationFormatter) -> list[int]:
    """Prefix lengths ``k < len(events)`` a pass may stop at, smallest first.

    A prefix may end after event ``i`` when every tool call so far has its
    result, no call so far lacked an id or reused one, event ``i`` is a
    complete non-user, non-system event without tool calls, the next event is
    not a further piece of the same response (``response_id`` in the event's
    extra fields), and the prefix adds text since the previous end.
    """
    ends: list[int] = []
    open_calls: set[str] = set()
    seen_ids: set[str] = set()
    poisoned = False
    text_since_end = False
    for i, event in enumerate(events[:-1]):
        message = event.message
        for call in message.tool_calls:
            if not call.id or call.id in seen_ids:
                poisoned = True
            seen_ids.add(call.id)
            open_calls.add(call.id)
        if is_tool_result(message) and message.tool_call_id:
            open_calls.discard(message.tool_call_id)
        if formatter.event_text(event):
            text_since_end = True
        if poisoned:
            break
        if open_calls or not text_since_end or event.partial:
            continue
        if is_user_turn(event) or message.role == "system" or event.author == "system" or message.tool_calls:
            continue
        if _same_response(event, events[i + 1]):
            continue
        ends.append(i + 1)
        text_since_end = False
    return ends


def _same_response(a: SessionEvent, b: SessionEvent) -> bool:
    ra = (a.model_extra or {}).get("response_id")
    rb = (b.model_extra or {}).get("response_id")
    return bool(ra) and ra == rb
