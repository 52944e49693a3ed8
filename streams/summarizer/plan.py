"""Planning one pass: which prefix of the delta, and the standalone request for it.

Preference order, so the previous summary is shortened only when it must be:
the whole delta with the whole previous summary; else the largest complete
prefix with the whole previous summary; else the whole delta, else the
largest complete prefix, with the previous summary cut head+tail. The
previous summary is never dropped: a cut keeps at least one character and
the truncation marker. When not even the smallest complete prefix fits
(with the shortest form of the previous summary), the pass fails with
:class:`SourceTooLargeError` (or :class:`PreviousSummaryTooLargeError`) and
nothing is dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from schemas import SessionEvent
from streams.errors import PermanentError
from streams.rules.tokens import TokenCounter
from streams.summarizer.budget import largest_fitting, safe_prefix_ends, truncate_middle
from streams.summarizer.conversation import ConversationFormatter
from streams.summarizer.prompts import SOURCE_BOUNDARY, PromptSet
from streams.summarizer.request import ChatRequest, SummarySource, count_request, standalone_request


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
        if self.fork_fallback:
            user = user.rstrip("\n") + "\n\n" + SOURCE_BOUNDARY + "\n\n" + self.prompts.render_fork()
        source = SummarySource(text, previous, self.prompts.max_summary_words)
        return standalone_request(user, self.prompts.render_system(), source=source)

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
        if count_request(full, self.counter) <= budget:
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
    """What one pass sends: the covered events, the request and how it was bounded."""

    events: list[SessionEvent]
    text: str
    request: ChatRequest
    truncated_previous: bool
    partial_prefix: bool


def plan_pass(
    events: Sequence[SessionEvent],
    previous: str,
    budget: int,
    builder: RequestBuilder,
    formatter: ConversationFormatter,
) -> PassPlan:
    """Choose the prefix of ``events`` this pass covers and build its request."""
    texts = [formatter.event_text(e) for e in events]

    def text_of(k: int) -> str:
        return "\n".join(t for t in texts[:k] if t)

    def plan(k: int, request: ChatRequest, truncated: bool) -> PassPlan:
        return PassPlan(list(events[:k]), text_of(k), request, truncated, k < len(events))

    n = len(events)
    full_request = builder.request(text_of(n), previous)
    if count_request(full_request, builder.counter) <= budget:
        return plan(n, full_request, False)
    ends = safe_prefix_ends(events, formatter)
    if previous:
        best = largest_fitting(0, len(ends) - 1, lambda i: builder.tokens(text_of(ends[i]), previous) <= budget)
        if best is not None:
            k = ends[best]
            return plan(k, builder.request(text_of(k), previous), False)

    def too_large(k: int, detail: str) -> SourceTooLargeError:
        text = text_of(k)
        source = builder.tokens(text, "")
        if source > budget or not previous:
            return SourceTooLargeError(source, budget, detail)
        return PreviousSummaryTooLargeError(builder.min_tokens(text, previous), budget, len(previous), detail)

    # From here on the previous summary is cut, never dropped: a prefix qualifies
    # only if it fits beside the shortest form of the previous summary.
    if builder.min_tokens(text_of(n), previous) <= budget:
        request, truncated = builder.bounded(text_of(n), previous, budget)
        return plan(n, request, truncated)
    if not ends:
        raise too_large(n, "the delta has no complete prefix to summarize first")
    if builder.min_tokens(text_of(ends[0]), previous) > budget:
        raise too_large(ends[0], f"even its smallest complete prefix ({ends[0]} of {n} events) does not fit")
    best = largest_fitting(0, len(ends) - 1, lambda i: builder.min_tokens(text_of(ends[i]), previous) <= budget)
    k = ends[best or 0]
    request, truncated = builder.bounded(text_of(k), previous, budget)
    return plan(k, request, truncated)
