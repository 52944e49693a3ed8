"""Model context windows: a registry of common models plus ``register_model_context_window``.

Resolution order for the context threshold: an explicit window (per event or per
run), then this registry by model name, then the policy's fallback (configured, else the summary
model's window, else 8192).
Register process-wide names once at start-up; per-tenant models should carry
their window on the event (``context_window``) instead.
"""

from __future__ import annotations

import threading

from streams.rules.errors import RuleConfigurationError

DEFAULT_FALLBACK_WINDOW = 8192

_BUILTIN: dict[str, int] = {
    "gpt-3.5-turbo": 16385,
    "gpt-4": 8192,
    "gpt-4-32k": 32768,
    "gpt-4-turbo": 128000,
    "gpt-4o": 128000,
    "gpt-4o-mini": 128000,
    "gpt-4.1": 1047576,
    "gpt-4.1-mini": 1047576,
    "gpt-4.1-nano": 1047576,
    "gpt-4.5": 128000,
    "gpt-5": 400000,
    "gpt-5-mini": 400000,
    "gpt-5-nano": 400000,
    "o1": 200000,
    "o1-mini": 128000,
    "o3": 200000,
    "o3-mini": 200000,
    "o4-mini": 200000,
    "deepseek-chat": 131072,
    "deepseek-reasoner": 131072,
    "claude-3-5-sonnet": 200000,
    "claude-3-7-sonnet": 200000,
    "claude-3-5-haiku": 200000,
    "claude-sonnet-4": 200000,
    "claude-opus-4": 200000,
    "gemini-1.5-pro": 2097152,
    "gemini-1.5-flash": 1048576,
    "gemini-2.0-flash": 1048576,
    "gemini-2.5-pro": 1048576,
    "gemini-2.5-flash": 1048576,
    "qwen-max": 32768,
    "qwen-plus": 131072,
    "qwen-turbo": 1000000,
    "llama-3.1-8b-instruct": 131072,
    "llama-3.1-70b-instruct": 131072,
    "mistral-large": 131072,
}

_registry: dict[str, int] = dict(_BUILTIN)
_lock = threading.Lock()
_found: dict[str, int | None] = {}
"""Answers by model name as given, cleared when the registry changes: a name not registered as
such is matched against every known name (per job for the summary model, per event for an
event's model)."""
_FOUND_MAX = 4096
"""Names remembered at most (an event's model name is the producer's: cleared past it)."""
_generation = 0
"""Registrations so far (an answer found before one is not remembered after it)."""


def register_model_context_window(model: str, tokens: int) -> None:
    """Register (or override) the window of ``model`` for this process."""
    if tokens <= 0:
        raise RuleConfigurationError(f"context window of {model!r} must be > 0, got {tokens}")
    global _generation
    with _lock:
        _registry[model.strip().lower()] = tokens
        _generation += 1
        _found.clear()


def lookup_context_window(model: str | None) -> int | None:
    """The registered window of ``model``: exact name, then without a provider
    prefix (``openai/gpt-4o``), then the longest registered prefix (dated
    variants such as ``gpt-4o-2024-08-06``); ``None`` if unknown.
    """
    if not model:
        return None
    found = _found.get(model, -1)  # -1: not asked yet (a window is positive)
    if found != -1:
        return found
    generation = _generation
    found = _scan(model)
    with _lock:
        if generation == _generation:
            if len(_found) >= _FOUND_MAX:
                _found.clear()
            _found[model] = found
    return found


def _scan(model: str) -> int | None:
    name = model.strip().lower()
    candidates = (name, name.rsplit("/", 1)[-1])
    for candidate in candidates:
        if candidate in _registry:
            return _registry[candidate]
    base = candidates[1]
    best = ""
    for known in _registry:
        if base.startswith(known) and base[len(known) : len(known) + 1] in ("-", "@", ":") and len(known) > len(best):
            best = known
    return _registry[best] if best else None


def resolve_context_window(explicit: int | None, model: str | None, fallback: int = DEFAULT_FALLBACK_WINDOW) -> int:
    """Explicit window, else the registry, else ``fallback``."""
    if explicit is not None and explicit > 0:
        return explicit
    return lookup_context_window(model) or fallback
