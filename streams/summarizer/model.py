"""What the summarizer needs from a model, whichever backend answers."""

from __future__ import annotations

import re
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
    "maximum model length",
    "exceeds the available context size",
)


def looks_like_context_overflow(*texts: object) -> bool:
    """True when any of ``texts`` reads like a provider's context-length refusal."""
    haystack = " ".join(str(t) for t in texts if t is not None).lower()
    return any(phrase in haystack for phrase in _CONTEXT_LENGTH_PHRASES)


_WINDOW_PATTERNS = tuple(
    re.compile(p, re.IGNORECASE)
    for p in (
        # OpenAI, vLLM, LiteLLM: "This model's maximum context length is 8192 tokens."
        r"maximum context length is\s+(\d[\d,]*)",
        # vLLM: "... is longer than the maximum model length of 4096"
        r"maximum model length(?: is| of)?\s+(\d[\d,]*)",
        # vLLM: "Input prompt (5000 tokens) is too long and exceeds limit of 4096"
        r"exceeds (?:the )?limit of\s+(\d[\d,]*)",
        # llama.cpp: "exceeds the available context size (4096 tokens)"
        r"available context size \((\d[\d,]*) tokens\)",
        # Anthropic-style: "prompt is too long: 210000 tokens > 200000 maximum"
        r">\s*(\d[\d,]*)\s*maximum",
        # "context window of 32768 tokens", "context_window=32768"
        r"context[ _]window(?: of| is|=|:)\s*(\d[\d,]*)",
    )
)


def context_window_in(*texts: object) -> int | None:
    """The window a provider names in a context-length refusal (``None``: it names none)."""
    for text in texts:
        if text is None:
            continue
        for pattern in _WINDOW_PATTERNS:
            found = pattern.search(str(text))
            if found:
                window = int(found.group(1).replace(",", ""))
                if window > 0:
                    return window
    return None


class ContextLengthError(PermanentError):
    """The provider refused the request as longer than its context.

    ``context_window`` is the window the provider named, when it did (the key's
    next requests are budgeted with it).
    """

    def __init__(self, message: str, context_window: int | None = None) -> None:
        super().__init__(message)
        self.context_window = context_window if context_window is None or context_window > 0 else None


@dataclass(frozen=True)
class ModelUsage:
    """Provider token counts of one call; ``None`` when not reported."""

    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int | None = None


CUT_OFF_FINISH_REASONS = frozenset({"length", "content_filter"})
"""Finish reasons of an answer the provider stopped before the model ended it (output limit, filter)."""


@dataclass(frozen=True)
class ModelResponse:
    """The text a model answered, and what it cost.

    ``finish_reason`` is the provider's reason the answer ended (``None`` when not reported).
    """

    text: str
    model: str
    usage: ModelUsage = ModelUsage()
    finish_reason: str | None = None

    @property
    def cut_off(self) -> bool:
        """The provider stopped the answer (its output limit, a content filter): the text is incomplete."""
        return self.finish_reason in CUT_OFF_FINISH_REASONS


@runtime_checkable
class SummaryModel(Protocol):
    """A model that turns a :class:`ChatRequest` into text.

    ``context_window`` is the model's window in tokens when the backend knows
    it; ``provider_budget`` an input cap the provider enforces below that.
    Implementations raise :class:`ContextLengthError` on a context refusal,
    :class:`~streams.errors.RetryableError` on transient failures and
    :class:`~streams.errors.PermanentError` otherwise; an empty answer is
    returned as empty text, not raised, and an answer the provider cut off
    with its ``finish_reason`` (the summarizer never stores it).
    """

    name: str
    context_window: int | None
    provider_budget: int | None

    async def complete(self, request: ChatRequest) -> ModelResponse:
        """Answer ``request``."""
        ...
