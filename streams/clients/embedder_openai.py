"""The OpenAI-compatible embeddings adapter (implements ``projections.embedding.Embedder``)."""

from __future__ import annotations

from collections.abc import Sequence

from openai import AsyncOpenAI

from schemas.settings import EmbedderSettings


class OpenAIEmbedder:
    """Calls ``/embeddings`` of any OpenAI-compatible endpoint with ``settings.model``."""

    def __init__(self, settings: EmbedderSettings) -> None:
        key = settings.api_key.get_secret_value() if settings.api_key else "unused"
        self._client = AsyncOpenAI(base_url=settings.base_url, api_key=key)
        self._model = settings.model
        self._dimensions = settings.dimensions

    @property
    def dimensions(self) -> int:
        return self._dimensions

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text (empty texts become a single space: endpoints reject empty input)."""
        if not texts:
            return []
        response = await self._client.embeddings.create(
            model=self._model, input=[t or " " for t in texts], dimensions=self._dimensions
        )
        return [list(item.embedding) for item in sorted(response.data, key=lambda d: d.index)]
