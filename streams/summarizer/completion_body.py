"""A chat-completion response body read as a :class:`ModelResponse` (pure: no client, no I/O).

The adapter reads the raw body instead of the ``openai`` client's typed parse (which builds a
whole ``ChatCompletion``, ~0.8 ms per call, for the four fields read here).
"""

from __future__ import annotations

from typing import Any

import orjson

from streams.errors import PermanentError
from streams.summarizer.model import ModelResponse, ModelUsage


def completion_response(body: bytes, model: str) -> ModelResponse:
    """Text, finish reason, model and usage of a chat-completion body (absent or odd fields: empty / ``None``).

    ``PermanentError`` for a body that is not a JSON object: an endpoint answering 200 with
    something else (a web page at a wrong ``base_url``) does not get better by retrying.
    """
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise PermanentError(f"LLM endpoint answered a body that is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise PermanentError(f"LLM endpoint answered JSON that is not a chat completion ({type(data).__name__})")
    choices = data.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    usage = _mapping(data.get("usage"))
    details = _mapping(usage.get("prompt_tokens_details"))
    name = data.get("model")
    finish = first.get("finish_reason") if isinstance(first, dict) else None
    return ModelResponse(
        text=content if isinstance(content, str) else "",
        model=name if isinstance(name, str) and name else model,
        usage=ModelUsage(
            prompt_tokens=_count(usage.get("prompt_tokens")),
            cached_tokens=_count(details.get("cached_tokens")),
            completion_tokens=_count(usage.get("completion_tokens")),
        ),
        finish_reason=finish if isinstance(finish, str) and finish else None,
    )


def _mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
