"""A model built at its first call: what the summarizer reads before a call, then one build for all callers."""

from __future__ import annotations

import asyncio

import pytest

from schemas.settings import LLMSettings
from streams.summarizer.deferred_model import DeferredModel
from streams.summarizer.extractive import ExtractiveModel
from streams.summarizer.factory import build_model
from streams.summarizer.request import ChatRequest


async def test_nothing_is_built_before_the_first_call_and_concurrent_calls_share_one_build() -> None:
    builds: list[int] = []

    def build() -> ExtractiveModel:
        builds.append(1)
        return ExtractiveModel()

    model = DeferredModel(build, name="m", context_window=1000)
    assert (model.name, model.context_window, model.provider_budget, model.built) == ("m", 1000, None, False)
    assert builds == []
    request = ChatRequest(messages=[{"role": "user", "content": "总结：第一条消息说明了重放的幂等性。"}])
    answers = await asyncio.gather(*(model.complete(request) for _ in range(5)))
    assert builds == [1] and model.built
    assert [a.model for a in answers] == [ExtractiveModel.name] * 5  # the built model answered each


async def test_a_failed_build_is_tried_again_by_the_next_call() -> None:
    attempts: list[int] = []

    def build() -> ExtractiveModel:
        attempts.append(1)
        if len(attempts) == 1:
            raise OSError("no route to the endpoint")
        return ExtractiveModel()

    model = DeferredModel(build, name="m", context_window=None)
    request = ChatRequest(messages=[{"role": "user", "content": "hello there, summarize this"}])
    with pytest.raises(OSError, match="no route"):
        await model.complete(request)
    assert (await model.complete(request)).model == ExtractiveModel.name and len(attempts) == 2


def test_it_says_what_the_endpoint_model_it_stands_for_says() -> None:
    """The cache key and the request budget are computed from these before any call."""
    llm = LLMSettings(api_key="k", base_url="http://127.0.0.1:9/v1", model="gpt-x", context_window=32_000)
    real = build_model(llm)
    deferred = DeferredModel(lambda: real, name=llm.model, context_window=llm.context_window)
    assert (deferred.name, deferred.context_window, deferred.provider_budget) == (
        real.name, real.context_window, real.provider_budget,
    )  # fmt: skip
