"""Planning one pass: which prefix of the delta, and the standalone request for it.

Preference order (never drop an event, never drop the previous summary; the
previous summary is the only copy of what lies before the boundary, while
every event payload is stored and recallable):

1. the whole delta, every payload whole, with the whole previous summary;
2. the largest complete prefix (the whole delta first) that fits with the
   whole previous summary once its payloads are cut head + tail (see
   :mod:`streams.summarizer.payloads`), each payload kept as long as the
   budget allows — the largest common cap, so the largest payloads go first;
3. only when the previous summary alone does not fit beside the smallest
   complete prefix in its smallest form: that form, with the previous
   summary cut head + tail (reported as ``truncated_previous_summary``).

A cut previous summary keeps at least one character and the truncation
marker. When not even step 3 fits, the pass fails with
:class:`SourceTooLargeError` (or :class:`PreviousSummaryTooLargeError`) and
nothing is dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from schemas import PayloadCut, SessionEvent
from streams.errors import PermanentError
from streams.rules.fit_search import largest_fitting
from streams.rules.tokens import TokenCounter
from streams.summarizer.budget import safe_prefix_ends, truncate_middle
from streams.summarizer.conversation import ConversationFormatter
from streams.summarizer.payloads import MIN_PAYLOAD_KEEP, PayloadForms
from streams.summarizer.prompts import SOURCE_BOUNDARY, PromptSet
from streams.summarizer.request import ChatRequest, SummarySource, count_request, fits_budget, standalone_request


class SourceTooLargeError(PermanentError):
    """The unsummarized conversation cannot fit the budget in any complete prefix."""

    def __init__(self, tokens: int, budget: int, detail: str = "") -> None:
        super().__init__(
            f"summary source conversation requires {tokens} tokens but input budget is {budget}"
            f"{'; ' + detail if detail else ''}; refusing to omit unsummarized conversation"
        )
        self.tokens = tokens
        self.budget = budget


class PreviousSummaryTooLargeError(SourceTooLargeError):
    """The conversation fits, but not with even a minimal cut of the previous summary."""

    def __init__(self, tokens: int, budget: int, previous_chars: int, detail: str = "") -> None:
        PermanentError.__init__(
            self,
            f"summary request requires {tokens} tokens with the previous summary ({previous_chars} chars) "
            f"cut to its shortest form, but input budget is {budget}"
            f"{'; ' + detail if detail else ''}; refusing to drop the previous summary",
        )
        self.tokens = tokens
        self.budget = budget
        self.previous_chars = previous_chars


@dataclass(frozen=True)
class RequestBuilder:
    """Renders standalone requests from conversation text and a previous summary."""

    prompts: PromptSet
    counter: TokenCounter
    fork_fallback: bool = False

    def request(self, text: str, previous: str) -> ChatRequest:
        """The standalone request (with the source boundary when it replaces a fork)."""
        if self.prompts.separate_previous_summary:
            user = self.prompts.render_prompt(text, previous)
        else:
            merged = "\n".join(p for p in (f"system: {previous.strip()}" if previous.strip() else "", text) if p)
            user = self.prompts.render_prompt(merged)
        system = self.prompts.render_system()
        if self.fork_fallback:
            # The fork prompt states the length limit itself (render_fork).
            user = user.rstrip("\n") + "\n\n" + SOURCE_BOUNDARY + "\n\n" + self.prompts.render_fork()
        elif note := self.prompts.length_note():
            system = f"{system.rstrip()}\n\n{note}" if system.strip() else note
        source = SummarySource(text, previous, self.prompts.max_summary_words, self.prompts.max_summary_length)
        return standalone_request(user, system, source=source)

    def tokens(self, text: str, previous: str) -> int:
        return count_request(self.request(text, previous), self.counter)

    def min_tokens(self, text: str, previous: str) -> int:
        """Tokens of the smallest request for ``text`` that still carries ``previous``.

        That is the whole previous summary or its shortest cut (one character
        and the truncation marker), whichever is smaller.
        """
        if not previous:
            return self.tokens(text, "")
        return min(self.tokens(text, previous), self.tokens(text, truncate_middle(previous, 1)))

    def bounded(self, text: str, previous: str, budget: int) -> tuple[ChatRequest, bool]:
        """The request for ``text`` within ``budget``; the previous summary may be cut, never dropped.

        Returns the request and whether the previous summary was shortened.
        Raises :class:`SourceTooLargeError` when ``text`` alone does not fit and
        :class:`PreviousSummaryTooLargeError` when no cut of ``previous`` fits beside it.
        """
        full = self.request(text, previous)
        if fits_budget(full, self.counter, budget):
            return full, False
        source_only = self.tokens(text, "")
        if source_only > budget:
            raise SourceTooLargeError(source_only, budget)
        keep = largest_fitting(
            1, len(previous) - 1, lambda r: self.tokens(text, truncate_middle(previous, r)) <= budget
        )
        if keep is None:
            raise PreviousSummaryTooLargeError(self.min_tokens(text, previous), budget, len(previous))
        return self.request(text, truncate_middle(previous, keep)), True


@dataclass(frozen=True)
class PassPlan:
    """What one pass sends: the covered events, the request and how it was bounded.

    ``cuts`` lists the event payloads the request carries head + tail only.
    """

    events: list[SessionEvent]
    text: str
    request: ChatRequest
    truncated_previous: bool
    partial_prefix: bool
    cuts: tuple[PayloadCut, ...] = ()


def plan_pass(
    events: Sequence[SessionEvent],
    previous: str,
    budget: int,
    builder: RequestBuilder,
    formatter: ConversationFormatter,
    *,
    whole_delta: bool = False,
    wrap: tuple[str, str] = ("", ""),
) -> PassPlan:
    """Choose the prefix of ``events`` this pass covers and build its request.

    With ``whole_delta`` every event is covered (no prefix is chosen): for an
    event list a pre-summary hook has already fixed. ``wrap`` is text a hook
    put before and after the conversation text; it is kept whole.
    """
    forms = PayloadForms(events, formatter)
    n = len(events)
    before, after = wrap

    def tokens(k: int, cap: int | None, prev: str) -> int:
        return builder.tokens(before + forms.text(k, cap) + after, prev)

    def fits(k: int, cap: int | None, prev: str) -> bool:
        return tokens(k, cap, prev) <= budget

    def plan(k: int, cap: int | None, prev: str, truncated: bool) -> PassPlan:
        form = forms.form(k, cap)
        text = before + form.text + after
        return PassPlan(list(events[:k]), text, builder.request(text, prev), truncated, k < n, form.cuts)

    # The whole delta first, its request built once (counted, then sent as is when it fits).
    whole = forms.form(n, None)
    whole_text = before + whole.text + after
    first = builder.request(whole_text, previous)
    if fits_budget(first, builder.counter, budget):
        return PassPlan(list(events), whole_text, first, False, False, whole.cuts)
    ends = [n] if whole_delta else [*safe_prefix_ends(events, formatter), n]
    best = largest_fitting(0, len(ends) - 1, lambda i: fits(ends[i], MIN_PAYLOAD_KEEP, previous))
    if best is not None:
        k = ends[best]
        if fits(k, None, previous):
            return plan(k, None, previous, False)
        cap = largest_fitting(MIN_PAYLOAD_KEEP, max(forms.longest(k), MIN_PAYLOAD_KEEP), lambda c: fits(k, c, previous))
        return plan(k, cap or MIN_PAYLOAD_KEEP, previous, False)

    # The previous summary alone does not fit beside the smallest form of the
    # smallest prefix: only now is it cut, beside exactly that form.
    k = ends[0]
    smallest = tokens(k, MIN_PAYLOAD_KEEP, "")
    detail = f"its smallest complete prefix ({k} of {n} events) with every payload cut to {MIN_PAYLOAD_KEEP} chars"
    if smallest > budget or not previous:
        raise SourceTooLargeError(smallest, budget, f"{detail} does not fit")
    keep = largest_fitting(1, len(previous) - 1, lambda r: fits(k, MIN_PAYLOAD_KEEP, truncate_middle(previous, r)))
    if keep is None:
        shortest = min(tokens(k, MIN_PAYLOAD_KEEP, truncate_middle(previous, 1)), tokens(k, MIN_PAYLOAD_KEEP, previous))
        raise PreviousSummaryTooLargeError(shortest, budget, len(previous), detail)
    return plan(k, MIN_PAYLOAD_KEEP, truncate_middle(previous, keep), True)


def first_request(
    events: Sequence[SessionEvent],
    previous: str,
    budget: int,
    builder: RequestBuilder,
    formatter: ConversationFormatter,
) -> ChatRequest:
    """``plan_pass(events, previous, budget, builder, formatter).request``: the same request, without
    the plan around it when the whole delta fits (the cache key of every job builds it)."""
    text = "\n".join([t for t in map(formatter.event_text, events) if t])
    request = builder.request(text, previous)
    if fits_budget(request, builder.counter, budget):
        return request
    return plan_pass(events, previous, budget, builder, formatter).request


def covered_prefix(
    planned: Sequence[SessionEvent], edited: Sequence[SessionEvent], original: Sequence[SessionEvent]
) -> list[SessionEvent] | None:
    """The events of ``original`` a pass covers when it sends only ``planned``, a prefix of ``edited``.

    ``edited`` is ``original`` as a pre-summary hook left it (events removed,
    changed or added, ids kept). The pass covers ``original`` up to the last
    event of ``planned`` (by id); what the hook removed before it goes with it,
    as it would have with the whole list. ``None`` when that is not a prefix
    the request holds: the last planned event is not one of ``original``, or an
    event left out of ``planned`` stands before it in ``original``.
    """
    if len(planned) == len(edited):
        return list(original)
    if not planned:
        return None
    position = {e.event_id: i for i, e in enumerate(original)}
    end = position.get(planned[-1].event_id)
    if end is None:
        return None
    if any(position.get(e.event_id, end + 1) <= end for e in edited[len(planned) :]):
        return None
    return list(original[: end + 1])
