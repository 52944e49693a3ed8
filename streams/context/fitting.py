"""Fitting a request into the model's window: payloads are cut before whole rounds are dropped.

Token tailoring (:mod:`.tailoring`) drops the oldest rounds, and what it drops
after the boundary is in no summary. Before that, the request is built again
with payloads cut in the middle (head and tail kept, the marker naming the
event id, so ``session_load`` reads it back), at thresholds halving from a
quarter of the budget: at each, the tool results (Pass 2 of
:mod:`.compaction`), tool-call arguments and user and assistant message texts
(:mod:`.payload_cuts`) above it are cut together, so the largest payloads go
first whatever their kind. A threshold no payload is over is not tried (the
first build reports the largest of each kind). What still does not fit needs
a summary (:attr:`Fitted.needs_summary`): the caller forces one and fits
again; only then may tailoring drop rounds, and the request names the events
it dropped (:func:`.tailoring.dropped_note`).

Also here: the model's window and the request budget, and Go's pre-call summary
refresh threshold. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from streams.context.assembly import AssembledRequest, AssemblyOptions
from streams.context.compaction import CompactionConfig
from streams.context.payload_cuts import PayloadCuts, PayloadPeaks
from streams.rules.context_windows import DEFAULT_FALLBACK_WINDOW, lookup_context_window

MIN_CUT_TOKENS = 64
"""The smallest Pass 2 threshold tried: below it a cut keeps little more than its own marker."""
REFRESH_MIN_TOKENS = 2000
"""Go's floor of the pre-call summary refresh threshold."""

Build = Callable[[AssemblyOptions], AssembledRequest]


def model_window(configured: int | None, model: str | None) -> int:
    """The agent model's window: the configured one, else the registry's entry for ``model``, else 8192."""
    if configured is not None:
        return configured
    return lookup_context_window(model) or DEFAULT_FALLBACK_WINDOW


def request_budget(window: int, reserved_output_tokens: int) -> int:
    """Tokens a request may take: the window less the reply's room (at most half the window)."""
    return window - min(max(0, reserved_output_tokens), window // 2)


def refresh_threshold(window: int, ratio: float) -> int:
    """Go's ``maybeCompactContextBeforeLLM`` threshold: ``clamp(int(window x ratio), 2000, window)``."""
    return min(window, max(REFRESH_MIN_TOKENS, int(window * ratio)))


def cut_thresholds(budget: int) -> list[int]:
    """Pass 2 thresholds to try, largest first: a quarter of the budget, halved down to ``MIN_CUT_TOKENS``."""
    out: list[int] = []
    step = budget // 4
    while step >= MIN_CUT_TOKENS:
        out.append(step)
        step //= 2
    return out or [MIN_CUT_TOKENS]


def with_payload_cuts(config: CompactionConfig, max_tokens: int) -> CompactionConfig:
    """``config`` with Pass 2 at ``max_tokens`` (or its own smaller threshold).

    Compaction off stays off for passes 0 and 1: only oversized payloads are
    cut, which a ``session_load`` of the named event undoes.
    """
    if config.enabled:
        current = config.oversized_tool_result_max_tokens
        return dataclasses.replace(
            config, oversized_tool_result_max_tokens=min(current, max_tokens) if current else max_tokens
        )
    return CompactionConfig(
        enabled=True, keep_recent_requests=0, tool_result_max_tokens=0,
        oversized_tool_result_max_tokens=max_tokens, keep_tool_names=config.keep_tool_names,
    )  # fmt: skip


@dataclass(frozen=True)
class Fitted:
    """The request to send, and how it was made to fit."""

    request: AssembledRequest
    cut_tokens: int | None = None
    """The Pass 2 threshold applied to fit (``None``: no payload was cut for the budget)."""
    cuts: PayloadCuts = field(default_factory=PayloadCuts)
    """The thresholds of the argument and message cuts applied to fit (0: not cut)."""

    @property
    def dropped_messages(self) -> int:
        """Messages tailoring left out: history in no summary and not in the request."""
        return self.request.report.tailored_messages

    @property
    def needs_summary(self) -> bool:
        """Payload cuts were not enough: rounds are dropped, or the request is still over the budget."""
        report = self.request.report
        return report.tailored_messages > 0 or report.over_budget


def fit(build: Build, options: AssemblyOptions) -> Fitted:
    """Build with ``options``; when tailoring has to drop messages, cut payloads until it need not.

    ``build`` assembles the request for the options it is given (the same read
    each time). Without a ``token_budget`` nothing is tailored or cut. At most
    one build per threshold of :func:`cut_thresholds` follows the first.
    """
    first = build(options)
    budget = options.token_budget
    if budget is None or not Fitted(first).needs_summary:
        return Fitted(first)
    best = Fitted(first)
    for tokens, cuts in cut_plan(budget, first.report.payload_peaks):
        compaction = with_payload_cuts(options.compaction, tokens)
        attempt = Fitted(build(dataclasses.replace(options, compaction=compaction, payload_cuts=cuts)), tokens, cuts)
        if _better(attempt, best):
            best = attempt
        if not attempt.needs_summary:
            break
    return best


def cut_plan(budget: int, peaks: PayloadPeaks | None = None) -> list[tuple[int, PayloadCuts]]:
    """The cuts to try, in order: at each threshold, every kind of payload above it.

    A threshold is left out when no payload of ``peaks`` is over it (the
    request would not change), and a kind none of whose payloads is over it is
    not cut there (no work). Without ``peaks`` every threshold cuts every kind.
    """
    plan: list[tuple[int, PayloadCuts]] = []
    for tokens in cut_thresholds(budget):
        if peaks is None:
            plan.append((tokens, PayloadCuts(arguments_max_tokens=tokens, message_max_tokens=tokens)))
            continue
        cuts = PayloadCuts(
            arguments_max_tokens=tokens if peaks.arguments > tokens else 0,
            message_max_tokens=tokens if peaks.message > tokens else 0,
        )
        if cuts.any or peaks.tool_result > tokens:
            plan.append((tokens, cuts))
    return plan


def _better(a: Fitted, b: Fitted) -> bool:
    ra, rb = a.request.report, b.request.report
    return (ra.tailored_messages, ra.over_budget, ra.prompt_tokens) < (rb.tailored_messages, rb.over_budget,
                                                                       rb.prompt_tokens)  # fmt: skip
