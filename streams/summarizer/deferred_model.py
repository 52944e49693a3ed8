"""A model built at its first call: a replay whose every job the cache answers never builds one.

Building the OpenAI adapter imports the ``openai`` SDK (about a second of CPU) and opens its
client. A live worker builds it at startup (in a thread, off the event loop); a replay answers
most jobs from the cache, often all, and its workers start draining at once, so building the
client there competes with the drain for nothing. :class:`DeferredModel` knows what the
summarizer asks of a model before any call (its name, window and provider budget come from
the settings) and builds the real one, in a thread, when the first call comes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from streams.summarizer.model import ModelResponse, SummaryModel
from streams.summarizer.request import ChatRequest


class DeferredModel:
    """A :class:`~streams.summarizer.model.SummaryModel` whose backend ``build()`` makes at the first call.

    ``name``, ``context_window`` and ``provider_budget`` are what the built model will say (the
    cache key and the request budget are computed before any call). ``build`` runs once, in a
    thread; calls waiting for it share that one build, and a build that fails is tried again
    by the next call.
    """

    def __init__(
        self,
        build: Callable[[], SummaryModel],
        *,
        name: str,
        context_window: int | None,
        provider_budget: int | None = None,
    ) -> None:
        self._build = build
        self._model: SummaryModel | None = None
        self._lock = asyncio.Lock()
        self.name = name
        self.context_window = context_window
        self.provider_budget = provider_budget

    @property
    def built(self) -> bool:
        return self._model is not None

    async def model(self) -> SummaryModel:
        if self._model is None:
            async with self._lock:
                if self._model is None:
                    self._model = await asyncio.to_thread(self._build)
        return self._model

    async def complete(self, request: ChatRequest) -> ModelResponse:
        return await (await self.model()).complete(request)
