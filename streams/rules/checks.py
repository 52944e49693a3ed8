"""Trigger checks: thresholds over the delta, composable with ``AllOf`` / ``AnyOf``.

Every threshold is strict (``value > threshold``: equal does not fire) and is
evaluated on the delta after the boundary, through a :class:`TriggerView`.
Composites short-circuit (``AllOf`` stops at the first failure, ``AnyOf`` at the
first pass). A top-level tuple of checks is an implicit ``AllOf``; an explicitly
empty one means "fire whenever there is summarizable content" (``always``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol

from schemas import SessionEvent, TriggerName, TriggerReport
from streams.rules.context_windows import DEFAULT_FALLBACK_WINDOW, resolve_context_window
from streams.rules.counters import Activity, Counters
from streams.rules.errors import RuleConfigurationError

MICROS_PER_MS = 1000


class TriggerView(NamedTuple):
    """What a check sees: the counters and activity of the checked scope.

    ``state`` is the :class:`~streams.rules.trigger_state.SessionTriggerState`
    being decided (for custom checks); ``filter_key`` the target being decided,
    ``trigger_key`` the key whose event triggered it (a full-session target
    triggered by a branch is checked on that branch's scope of the full delta).
    """

    filter_key: str
    trigger_key: str
    app_name: str
    counters: Counters
    activity: Activity
    state: Any
    event: SessionEvent | None = None
    context: Mapping[str, Any] = MappingProxyType({})


class CheckOutcome(NamedTuple):
    """One evaluated check."""

    name: TriggerName
    passed: bool
    value: float
    threshold: float
    unit: str
    window: int | None = None
    ratio: float | None = None

    def report(self, detail: str = "") -> TriggerReport:
        return TriggerReport(
            name=self.name,
            value=self.value,
            threshold=self.threshold,
            unit=self.unit,
            window=self.window,
            ratio=self.ratio,
            detail=detail,
        )


Evaluation = tuple[bool, tuple[CheckOutcome, ...]]


class Check(Protocol):
    """A trigger condition."""

    def evaluate(self, view: TriggerView) -> Evaluation:
        """Whether it passes, and every leaf outcome evaluated on the way."""
        ...


_new_outcome = tuple.__new__
"""``CheckOutcome`` without the named tuple's Python-level ``__new__`` (hot path)."""


def _leaf(name: TriggerName, value: float, threshold: float, unit: str) -> Evaluation:
    passed = value > threshold
    return passed, (_new_outcome(CheckOutcome, (name, passed, value, threshold, unit, None, None)),)


@dataclass(frozen=True, slots=True)
class EventThreshold:
    """More than ``events`` counted events in the delta."""

    events: int

    def evaluate(self, view: TriggerView) -> Evaluation:
        return _leaf("event_threshold", view.counters.events, self.events, "events")


@dataclass(frozen=True, slots=True)
class TokenThreshold:
    """More than ``tokens`` estimated tokens of delta text (not provider usage)."""

    tokens: int

    def evaluate(self, view: TriggerView) -> Evaluation:
        return _leaf("token_threshold", view.counters.tokens, self.tokens, "tokens")


@dataclass(frozen=True, slots=True)
class TimeThreshold:
    """An idle gap of more than ``seconds`` before the current top-level request.

    Computed from event timestamps; an unavailable gap fails with value 0 (never
    the wall clock), and a gap a summary already covered is unavailable.
    """

    seconds: float

    def evaluate(self, view: TriggerView) -> Evaluation:
        gap = view.activity.gap
        if gap is None:
            return False, (
                _new_outcome(CheckOutcome, ("time_threshold", False, 0, self.seconds * 1000, "ms", None, None)),
            )
        return _leaf("time_threshold", gap // MICROS_PER_MS, self.seconds * 1000, "ms")


@dataclass(frozen=True, slots=True)
class ContextThreshold:
    """Delta tokens above ``max(int(window × ratio), min_tokens)``.

    The window is the scope's explicit ``context_window`` (latest event that had
    one), else the registry entry of its latest ``model``, else ``fallback_window``.
    """

    ratio: float = 0.5
    min_tokens: int = 2000
    fallback_window: int = DEFAULT_FALLBACK_WINDOW

    def __post_init__(self) -> None:
        if not 0 < self.ratio <= 1:
            raise RuleConfigurationError(f"context_threshold: ratio must be in (0, 1], got {self.ratio}")
        if self.min_tokens < 0 or self.fallback_window <= 0:
            raise RuleConfigurationError(
                f"context_threshold: min_tokens must be >= 0 and fallback_window > 0, "
                f"got {self.min_tokens} and {self.fallback_window}"
            )

    def threshold_for(self, window: int) -> int:
        return max(int(window * self.ratio), self.min_tokens)

    def evaluate(self, view: TriggerView) -> Evaluation:
        activity = view.activity
        window = resolve_context_window(activity.context_window, activity.model, self.fallback_window)
        value, threshold = view.counters.tokens, self.threshold_for(window)
        outcome = CheckOutcome("context_threshold", value > threshold, value, threshold, "tokens", window, self.ratio)
        return outcome.passed, (outcome,)


@dataclass(frozen=True, slots=True)
class ConversationThreshold:
    """More than ``rounds`` user messages in the delta (the Python guide's check,
    counted from the delta rather than with a mutable counter)."""

    rounds: int

    def evaluate(self, view: TriggerView) -> Evaluation:
        return _leaf("conversation_threshold", view.counters.rounds, self.rounds, "rounds")


@dataclass(frozen=True, slots=True)
class ImportantContent:
    """Some text part of the delta longer than ``chars`` once stripped (Python guide; default 10),
    or some event of the delta containing one of ``keywords`` (case-insensitive).

    ``chars=None`` checks the keywords alone. A keyword match reports ``unit="matches"``
    (the number of matching events, threshold 0). The policy collects the keywords
    (``SummaryPolicy.important_keywords``) so the fold can flag matching events.
    """

    chars: int | None = 10
    keywords: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.keywords, str):
            raise RuleConfigurationError("important_content: keywords must be a sequence of strings, not one string")
        object.__setattr__(self, "keywords", normalize_keywords(self.keywords))
        if self.chars is None and not self.keywords:
            raise RuleConfigurationError("important_content: needs a length threshold (chars) or keywords")

    def evaluate(self, view: TriggerView) -> Evaluation:
        counters = view.counters
        if self.keywords and (counters.keywords or self.chars is None):
            return _leaf("important_content", counters.keywords, 0, "matches")
        return _leaf("important_content", counters.max_text_len, self.chars or 0, "chars")


def normalize_keywords(keywords: Sequence[str]) -> tuple[str, ...]:
    """Stripped, lower-cased, without empties and duplicates, in order."""
    return tuple(dict.fromkeys(k.strip().lower() for k in keywords if k.strip()))


def important_keywords(checks: Sequence[Check]) -> tuple[str, ...]:
    """Every keyword of the :class:`ImportantContent` checks in ``checks`` (nested ones included)."""
    found: list[str] = []
    for check in checks:
        if isinstance(check, ImportantContent):
            found.extend(check.keywords)
        elif isinstance(check, (AllOf, AnyOf)):
            found.extend(important_keywords(check.checks))
    return tuple(dict.fromkeys(found))


CustomFn = Callable[[TriggerView, Mapping[str, Any]], bool]


@dataclass(frozen=True, slots=True)
class CustomCheck:
    """A user callable ``fn(view, context) -> bool``; ``context`` is ``view.context``.

    It must be deterministic in its inputs (no wall clock) to keep replay exact.
    """

    fn: CustomFn
    label: str = "custom"

    def evaluate(self, view: TriggerView) -> Evaluation:
        passed = bool(self.fn(view, view.context))
        return passed, (CheckOutcome("custom", passed, float(passed), 0, ""),)


@dataclass(frozen=True, slots=True)
class AllOf:
    """Every check passes (stops at the first failure)."""

    checks: tuple[Check, ...]

    def evaluate(self, view: TriggerView) -> Evaluation:
        return evaluate_all(self.checks, view)


@dataclass(frozen=True, slots=True)
class AnyOf:
    """Some check passes (stops at the first pass)."""

    checks: tuple[Check, ...]

    def evaluate(self, view: TriggerView) -> Evaluation:
        outcomes: tuple[CheckOutcome, ...] = ()
        for check in self.checks:
            passed, seen = check.evaluate(view)
            outcomes += seen
            if passed:
                return True, outcomes
        return False, outcomes


def checks_all(*checks: Check) -> AllOf:
    return AllOf(tuple(checks))


def checks_any(*checks: Check) -> AnyOf:
    return AnyOf(tuple(checks))


def evaluate_all(checks: Sequence[Check], view: TriggerView) -> Evaluation:
    """AND over ``checks``, stopping at the first failure; an empty sequence passes."""
    if len(checks) == 1:
        return checks[0].evaluate(view)
    outcomes: tuple[CheckOutcome, ...] = ()
    for check in checks:
        passed, seen = check.evaluate(view)
        outcomes += seen
        if not passed:
            return False, outcomes
    return True, outcomes


_PREFERRED: tuple[TriggerName, ...] = ("context_threshold", "token_threshold", "event_threshold", "time_threshold")


def preferred_outcome(outcomes: Sequence[CheckOutcome]) -> CheckOutcome | None:
    """The outcome to report: the first passing context, token, event, then time
    check; else the first passing one; else the last evaluated (Go's order)."""
    passing = [o for o in outcomes if o.passed]
    for name in _PREFERRED:
        for outcome in passing:
            if outcome.name == name:
                return outcome
    if passing:
        return passing[0]
    return outcomes[-1] if outcomes else None
