"""The LLM adapter: the ``openai`` async client against any OpenAI-compatible endpoint.

The only module of distill that imports ``openai``. Transient failures (429,
408/409, 5xx, timeouts, dropped connections) are retried by the client itself
with exponential backoff that honours ``Retry-After``; what is still failing
afterwards becomes :class:`~streams.errors.RetryableError` (carrying the
server's ``Retry-After``), a context-length refusal becomes
:class:`~streams.summarizer.model.ContextLengthError`, anything else
:class:`~streams.errors.PermanentError`.
"""

from __future__ import annotations

import inspect
from functools import cache
from typing import Any

import openai
from openai import AsyncOpenAI

from schemas.settings import LLMSettings
from streams.errors import PermanentError, RetryableError
from streams.summarizer.completion_body import completion_response
from streams.summarizer.model import (
    ContextLengthError,
    ModelResponse,
    context_window_in,
    looks_like_context_overflow,
)
from streams.summarizer.request import ChatRequest

_PLACEHOLDER_KEY = "not-needed"
_SENT_AS_GIVEN = frozenset({"messages", "tools"})
"""Request fields built as wire JSON (``ChatRequest.to_openai``): not run through the client's transform."""


@cache
def _create_parameters() -> frozenset[str]:
    from openai.resources.chat.completions import AsyncCompletions

    return frozenset(inspect.signature(AsyncCompletions.create).parameters) - {"self"}


class OpenAIChatModel:
    """A :class:`~streams.summarizer.model.SummaryModel` backed by chat completions."""

    provider_budget: int | None = None

    def __init__(self, settings: LLMSettings, *, client: AsyncOpenAI | None = None) -> None:
        self.settings = settings
        self.name = settings.model
        self.context_window = settings.context_window
        api_key = settings.api_key.get_secret_value() if settings.api_key is not None else _PLACEHOLDER_KEY
        self.client = client or AsyncOpenAI(
            api_key=api_key,
            base_url=settings.base_url,
            timeout=settings.timeout_s,
            max_retries=settings.max_retries,
        )

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self.client.close()

    def _arguments(self, request: ChatRequest) -> dict[str, Any]:
        wire = request.to_openai()
        wire["stream"] = False
        if self.settings.temperature is not None:
            wire.setdefault("temperature", self.settings.temperature)
        if self.settings.max_output_tokens is not None:
            wire.setdefault("max_tokens", self.settings.max_output_tokens)
        known = _create_parameters()
        # The messages (and tools) are wire dicts already: they go out as given, in ``extra_body``,
        # which the client merges into the JSON body after its request transform. That transform
        # walks every message against the typed-dict unions of the params and changes nothing
        # (~1 ms of CPU per call, a tenth of a job). ``messages`` is declared: an empty placeholder
        # there, replaced by the extra.
        args = {k: v for k, v in wire.items() if k in known and k not in _SENT_AS_GIVEN}
        extra = {k: v for k, v in wire.items() if k not in known or k in _SENT_AS_GIVEN}
        args["messages"] = []
        args["extra_body"] = extra
        args["model"] = self.name
        return args

    async def complete(self, request: ChatRequest) -> ModelResponse:
        """Send ``request``; an empty answer comes back as empty text, a cut-off one with its ``finish_reason``."""
        try:
            # The raw body, read here: the client's typed parse builds a whole ``ChatCompletion``
            # (~0.8 ms per call, a tenth of a job) for the four fields below.
            raw = await self.client.chat.completions.with_raw_response.create(**self._arguments(request))
        except openai.APIStatusError as exc:
            raise _translate_status(exc) from exc
        except openai.APITimeoutError as exc:
            raise RetryableError(f"LLM request timed out after {self.settings.timeout_s}s") from exc
        except openai.APIConnectionError as exc:
            raise RetryableError(f"LLM endpoint unreachable: {exc}") from exc
        except openai.OpenAIError as exc:
            raise PermanentError(f"LLM call failed: {type(exc).__name__}: {exc}") from exc
        return completion_response(raw.content, self.name)


def _retry_after(exc: openai.APIStatusError) -> float | None:
    headers = exc.response.headers
    for header, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(header)
        if value is None:
            continue
        try:
            return max(float(value) * scale, 0.0)
        except ValueError:
            continue
    return None


def _translate_status(exc: openai.APIStatusError) -> Exception:
    status = exc.status_code
    detail = f"LLM endpoint answered HTTP {status}: {exc.message}"
    if looks_like_context_overflow(exc.code, exc.type, exc.message, exc.body):
        return ContextLengthError(detail, context_window_in(exc.message, exc.body))
    if status in (408, 409, 429) or status >= 500:
        return RetryableError(detail, retry_after=_retry_after(exc))
    return PermanentError(detail)
