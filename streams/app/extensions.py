"""User Python hooks: ``distill worker --app mymodule:build``.

``mymodule`` is imported with the current directory on ``sys.path``.

``build`` is called with the settings and returns an :class:`Extensions`
(or is an ``Extensions`` instance itself). Everything is optional: custom
policies (custom checks), summary hooks and model callbacks, or a whole
summarizer per app (e.g. a ``DynamicSummarizer`` for per-tenant models).
"""

from __future__ import annotations

import importlib
import os
import sys
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


def _cwd_importable() -> None:
    """Put the current directory first on ``sys.path`` (as ``faust -A`` and ``python -m`` do).

    The ``distill`` console script's ``sys.path[0]`` is its bin directory, so a
    module next to the user (``distill worker --app myhooks:build``) is not
    importable otherwise.
    """
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


def load_extensions(spec: str | None, settings: Settings) -> Extensions:
    """Import ``module:attribute`` and build the extensions (``None`` → none)."""
    if not spec:
        return Extensions()
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigurationError(f"--app expects 'module:callable', got {spec!r}")
    _cwd_importable()
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
