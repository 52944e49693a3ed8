"""Hooks around a summary and callbacks around each model call.

Every hook and callback may be a plain function or a coroutine function.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeAlias, TypeVar, Union

from schemas import SessionEvent, SessionKey, SummaryReport
from streams.summarizer.model import ModelResponse
from streams.summarizer.request import ChatRequest

T = TypeVar("T")
MaybeAwaitable: TypeAlias = Union[T, Awaitable[T]]  # noqa: UP007 - a generic alias needs Union


async def resolve(value: MaybeAwaitable[T]) -> T:
    """Await ``value`` when a hook returned a coroutine."""
    if inspect.isawaitable(value):
        awaited: T = await value
        return awaited
    return value


@dataclass
class PreSummaryContext:
    """What a pass is about to summarize; the hook may edit it in place.

    A changed ``text`` wins; otherwise changed ``events`` are formatted
    again; ``previous_summary`` may be edited either way.
    """

    session: SessionKey | None
    filter_key: str
    events: list[SessionEvent]
    text: str
    previous_summary: str
    context: dict[str, Any] = field(default_factory=dict)


@dataclass
class PostSummaryContext:
    """The summary a pass produced and where its boundary will be; edit ``summary``."""

    session: SessionKey | None
    filter_key: str
    summary: str
    last_event_id: str
    cutoff_at: datetime
    context: dict[str, Any] = field(default_factory=dict)


@dataclass
class BeforeModelArgs:
    """The final request, just before it is sent; the callback may edit it in place."""

    request: ChatRequest
    model: str
    context: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BeforeModelResult:
    """Returned by a before-model callback to answer without calling the model."""

    custom_response: str


@dataclass
class AfterModelArgs:
    """The request sent and the response received."""

    request: ChatRequest
    response: ModelResponse
    context: dict[str, Any] = field(default_factory=dict)


PreSummaryHook = Callable[[PreSummaryContext], MaybeAwaitable[None]]
PostSummaryHook = Callable[[PostSummaryContext], MaybeAwaitable[None]]
BeforeModelCallback = Callable[[BeforeModelArgs], MaybeAwaitable[BeforeModelResult | None]]
AfterModelCallback = Callable[[AfterModelArgs], MaybeAwaitable[ModelResponse | None]]
ReportHook = Callable[[SummaryReport, BaseException | None], MaybeAwaitable[None]]
"""Called once per summary attempt, with the error when it failed."""


@dataclass(frozen=True)
class SummaryHooks:
    """Everything user code can plug into a summarizer.

    With ``abort_on_error`` a failing pre/post hook fails the summary; without
    it the hook's error is ignored and the unedited input/summary is used.
    """

    pre_summary: PreSummaryHook | None = None
    post_summary: PostSummaryHook | None = None
    abort_on_error: bool = False
    before_model: tuple[BeforeModelCallback, ...] = ()
    after_model: tuple[AfterModelCallback, ...] = ()
    report: ReportHook | None = None


async def run_before_model(
    callbacks: tuple[BeforeModelCallback, ...], args: BeforeModelArgs
) -> BeforeModelResult | None:
    """Run callbacks in order; the first custom response stops the chain."""
    for callback in callbacks:
        result: BeforeModelResult | None = await resolve(callback(args))
        if result is not None:
            return result
    return None


async def run_after_model(callbacks: tuple[AfterModelCallback, ...], args: AfterModelArgs) -> ModelResponse:
    """Run callbacks in order; each may replace the response the next one sees."""
    for callback in callbacks:
        replaced: ModelResponse | None = await resolve(callback(args))
        if replaced is not None:
            args.response = replaced
    return args.response
