"""Event payloads cut head + tail for the summary input, marked for ``session_load``.

When a summary request must shrink, the payloads of events go first: tool
results, tool-call arguments and other message contents longer than a cap
keep their head and tail, with a marker naming the event (and the tool call)
so the agent can fetch the rest with ``session_load``. The event itself is
stored whole; only the summary input is shortened. Every payload has a
smallest form (:data:`MIN_PAYLOAD_KEEP` characters and the marker), so one
large event never makes a key unsummarizable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from projections.textcut import head_and_tail
from schemas import PayloadCut, SessionEvent, ToolCall
from schemas.summaries import PayloadPart
from streams.rules.eligibility import shown_message
from streams.summarizer.conversation import ConversationFormatter, is_summarizable, is_tool_result

MIN_PAYLOAD_KEEP = 64
"""Characters (head + tail) every cut payload keeps, at the least."""

_WHAT = {
    "tool_result": "this tool result",
    "tool_arguments": "the arguments of this tool call",
    "content": "this message",
}


def cut_marker(part: PayloadPart, left_out: int, event_id: str, tool_call_id: str | None = None) -> str:
    """``[… 18,442 chars of this tool result (call c3) left out; session_load(event_id="e17") returns it whole …]``."""
    what = _WHAT[part] + (f" (call {tool_call_id})" if tool_call_id else "")
    pronoun = "them" if part == "tool_arguments" else "it"
    return (
        f'\n[… {left_out:,} chars of {what} left out; session_load(event_id="{event_id}") returns {pronoun} whole …]\n'
    )


def cut_payload(
    text: str, cap: int, part: PayloadPart, event_id: str, tool_call_id: str | None = None
) -> tuple[str, PayloadCut] | None:
    """``text`` as head + marker + tail within about ``cap`` kept characters; ``None`` when that is no shorter."""
    if len(text) <= cap:
        return None
    head, tail = head_and_tail(text, cap)
    left_out = len(text) - len(head) - len(tail)
    cut = head + cut_marker(part, left_out, event_id, tool_call_id) + tail
    if len(cut) >= len(text):
        return None
    record = PayloadCut(
        event_id=event_id, part=part, tool_call_id=tool_call_id, chars=len(text), kept_chars=len(head) + len(tail)
    )
    return cut, record


def cut_event(event: SessionEvent, cap: int | None) -> tuple[SessionEvent, tuple[PayloadCut, ...]]:
    """``event`` with every payload longer than ``cap`` cut (``None``: unchanged).

    Reasoning content is never part of the summary input, so it is not cut. An error
    event without content is cut in the text it stands for (``type: <t>, message: <m>``).
    """
    if cap is None or not is_summarizable(event):
        return event, ()
    message = shown_message(event)
    cuts: list[PayloadCut] = []
    calls: list[ToolCall] = []
    for call in message.tool_calls:
        done = cut_payload(call.function.arguments, cap, "tool_arguments", event.event_id, call.id)
        if done is None:
            calls.append(call)
            continue
        calls.append(call.model_copy(update={"function": call.function.model_copy(update={"arguments": done[0]})}))
        cuts.append(done[1])
    update: dict[str, object] = {}
    if cuts:
        update["tool_calls"] = tuple(calls)
    if message.content:
        result = is_tool_result(message)
        done = cut_payload(
            message.content,
            cap,
            "tool_result" if result else "content",
            event.event_id,
            message.tool_call_id if result else None,
        )
        if done is not None:
            update["content"] = done[0]
            cuts.append(done[1])
    if not update:
        return event, ()
    return event.model_copy(update={"message": message.model_copy(update=update)}), tuple(cuts)


def longest_payload(event: SessionEvent) -> int:
    """Length of the event's longest payload (0 for events outside the summary input)."""
    if not is_summarizable(event):
        return 0
    sizes = [len(c.function.arguments) for c in event.message.tool_calls]
    sizes.append(len(shown_message(event).content or ""))
    return max(sizes)


@dataclass(frozen=True)
class Form:
    """The summary-input text of a prefix at one payload cap, and what was cut."""

    text: str
    cuts: tuple[PayloadCut, ...]


class PayloadForms:
    """Texts of the events of a delta at a payload cap, cached per event and cap.

    ``cap=None`` is the whole text; any int cuts every payload longer than it.
    """

    def __init__(self, events: Sequence[SessionEvent], formatter: ConversationFormatter) -> None:
        self.events = list(events)
        self.formatter = formatter
        self._cache: dict[tuple[int, int], tuple[str, tuple[PayloadCut, ...]]] = {}
        self._whole: list[str | None] = [None] * len(self.events)

    def _whole_text(self, i: int) -> str:
        text = self._whole[i]
        if text is None:
            text = self._whole[i] = self.formatter.event_text(self.events[i])
        return text

    def _event(self, i: int, cap: int | None) -> tuple[str, tuple[PayloadCut, ...]]:
        if cap is None:
            return self._whole_text(i), ()
        key = (i, cap)
        hit = self._cache.get(key)
        if hit is None:
            event, cuts = cut_event(self.events[i], cap)
            # Nothing cut at this cap: the whole text, formatted once (a cap search tries many caps).
            hit = (self.formatter.event_text(event), cuts) if cuts else (self._whole_text(i), ())
            self._cache[key] = hit
        return hit

    def form(self, k: int, cap: int | None) -> Form:
        """The first ``k`` events at ``cap``."""
        if cap is None:
            # Every summary request is first built whole (one form per job): no cut, no per-event tuple.
            return Form("\n".join([t for t in map(self._whole_text, range(k)) if t]), ())
        texts: list[str] = []
        cuts: list[PayloadCut] = []
        for i in range(k):
            text, event_cuts = self._event(i, cap)
            if text:
                texts.append(text)
                cuts.extend(event_cuts)
        return Form("\n".join(texts), tuple(cuts))

    def text(self, k: int, cap: int | None) -> str:
        return self.form(k, cap).text

    def longest(self, k: int) -> int:
        """The longest payload among the first ``k`` events."""
        return max((longest_payload(e) for e in self.events[:k]), default=0)
