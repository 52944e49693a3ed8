"""The embedder the read and write sides accept for semantic search (a Protocol; adapters live elsewhere)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

MAX_EMBED_CHARS = 8000
"""Texts are cut to this many characters before embedding (endpoint input limits)."""


class Embedder(Protocol):
    """Turns texts into vectors of ``dimensions`` floats (an OpenAI-compatible endpoint, a local model...)."""

    @property
    def dimensions(self) -> int: ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order."""
        ...
