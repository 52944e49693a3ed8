"""User Python hooks: ``distill worker --app mymodule:build``.

``build`` is called with the settings and returns an :class:`Extensions`
(or is an ``Extensions`` instance itself). Everything is optional: custom
policies (custom checks), summary hooks and model callbacks, or a whole
summarizer per app (e.g. a ``DynamicSummarizer`` for per-tenant models).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from schemas.settings import Settings
from streams.errors import ConfigurationError
from streams.rules.policy import PolicySet
from streams.summarizer import SummarizerLike, SummaryHooks


@dataclass(frozen=True)
class Extensions:
    """What a user module may plug into the worker."""

    policies: PolicySet | None = None
    hooks: SummaryHooks | None = None
    summarizer_for: Callable[[str], SummarizerLike] | None = None


def load_extensions(spec: str | None, settings: Settings) -> Extensions:
    """Import ``module:attribute`` and build the extensions (``None`` → none)."""
    if not spec:
        return Extensions()
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigurationError(f"--app expects 'module:callable', got {spec!r}")
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(f"cannot load {spec!r}: {exc}") from exc
    built = target if isinstance(target, Extensions) else target(settings)
    if not isinstance(built, Extensions):
        raise ConfigurationError(
            f"{spec!r} returned {type(built).__name__}, expected streams.app.extensions.Extensions"
        )
    return built
