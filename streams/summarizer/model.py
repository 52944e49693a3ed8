"""What the summarizer needs from a model, whichever backend answers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from streams.errors import PermanentError
from streams.summarizer.request import ChatRequest

_CONTEXT_LENGTH_PHRASES = (
    "context_length_exceeded",
    "context_window_exceeded",
    "context length exceeded",
    "context window exceeded",
    "maximum context length",
    "prompt is too long",
    "input is too long",
    "too many tokens",
    "reduce the length of the messages",
)


def looks_like_context_overflow(*texts: object) -> bool:
    """True when any of ``texts`` reads like a provider's context-length refusal."""
    haystack = " ".join(str(t) for t in texts if t is not None).lower()
    return any(phrase in haystack for phrase in _CONTEXT_LENGTH_PHRASES)


class ContextLengthError(PermanentError):
    """The provider refused the request as longer than its context."""


@dataclass(frozen=True)
class ModelUsage:
    """Provider token counts of one call; ``None`` when not reported."""

    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int | None = None


@dataclass(frozen=True)
class ModelResponse:
    """The text a model answered, and what it cost."""

    text: str
    model: str
    usage: ModelUsage = ModelUsage()


@runtime_checkable
class SummaryModel(Protocol):
    """A model that turns a :class:`ChatRequest` into text.

    ``context_window`` is the model's window in tokens when the backend knows
    it; ``provider_budget`` an input cap the provider enforces below that.
    Implementations raise :class:`ContextLengthError` on a context refusal,
    :class:`~streams.errors.RetryableError` on transient failures and
    :class:`~streams.errors.PermanentError` otherwise; an empty answer is
    returned as empty text, not raised.
    """

    name: str
    context_window: int | None
    provider_budget: int | None

    async def complete(self, request: ChatRequest) -> ModelResponse:
        """Answer ``request``."""
        ...
