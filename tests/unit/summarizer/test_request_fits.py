"""``fits_budget``: the budget check of a summary request, answered from its bytes when they suffice."""

from __future__ import annotations

from typing import Any

import pytest

from schemas.settings import Settings
from streams.rules.tokens import ScriptAwareTokenCounter, SimpleTokenCounter, TiktokenCounter
from streams.summarizer import build_summarizer
from streams.summarizer.request import ChatRequest, count_request, fits_budget, standalone_request

from .helpers import EchoModel, event

TEXTS = [
    "",
    "hello",
    "请帮我看看这个问题 M1",
    "<|endoftext|> " * 20,
    'tool output: {"a": [1, 2, 3]}\n' * 40,
    "é" * 300,
]


class _Spy:
    """An encoding that counts its calls."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls = 0

    def encode_ordinary(self, text: str) -> list[int]:
        self.calls += 1
        return self.inner.encode_ordinary(text)  # type: ignore[no-any-return]


def _requests() -> list[ChatRequest]:
    out = [standalone_request(user, system) for user in TEXTS for system in ("", "You summarize. 总结")]
    out.append(ChatRequest(messages=[{"role": "user", "content": [{"type": "text", "text": "parts " * 50}]}]))
    out.append(ChatRequest(messages=[{"role": "assistant", "content": "x", "reasoning_content": "why " * 30}]))
    out.append(ChatRequest(messages=[{"role": "developer", "content": "dev " * 10}]))
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    out.append(ChatRequest(messages=[{"role": "user", "content": "with a tool"}], tools=[tool]))
    return out


@pytest.mark.parametrize(
    "counter",
    [
        TiktokenCounter("gpt-4o"),
        SimpleTokenCounter(),
        SimpleTokenCounter(1.0),
        SimpleTokenCounter(0.25),
        ScriptAwareTokenCounter(),
        ScriptAwareTokenCounter(1.0),
        ScriptAwareTokenCounter(0.5),
    ],
    ids=["tiktoken", "simple", "simple-1", "simple-0.25", "script-aware", "script-aware-1", "script-aware-0.5"],
)
def test_fits_budget_is_the_exact_comparison(counter: Any) -> None:
    for request in _requests():
        exact = count_request(request, counter)
        for budget in {0, 1, max(exact - 1, 0), exact, exact + 1, 3 * exact + 50, 100_000}:
            assert fits_budget(request, counter, budget) == (exact <= budget), (request.messages, budget)


def test_a_request_far_within_its_budget_is_not_encoded() -> None:
    counter = TiktokenCounter("gpt-4o")
    spy = counter._encoding = _Spy(counter._encoding)
    request = standalone_request("请帮我看看这个问题 " * 100, "You summarize.")
    assert fits_budget(request, counter, 100_000)
    assert spy.calls == 0
    assert not fits_budget(request, counter, 10)  # near or over the budget: counted
    assert spy.calls > 0


async def test_a_tiktoken_summarizer_keys_and_plans_without_encoding_a_request_that_fits() -> None:
    settings = Settings.model_validate({"summary": {"token_counter": "tiktoken"}})
    summarizer = build_summarizer(settings, model=EchoModel(context_window=128_000))  # type: ignore[arg-type]
    counter = summarizer.counter()
    assert isinstance(counter, TiktokenCounter)
    spy = counter._encoding = _Spy(counter._encoding)
    events = [event(i, "user" if i % 2 == 0 else "agent", f"第 {i} 条消息 M{i}") for i in range(12)]
    key = summarizer.cache_key("an earlier summary", events)
    assert key is not None and spy.calls == 0


def test_the_estimating_counters_declare_a_token_per_byte_at_most_only_at_a_rune_or_more_a_token() -> None:
    # Below a rune a token, "é" * 300 (600 bytes) counts 1,200 tokens: no byte bound holds.
    assert SimpleTokenCounter().at_most_a_token_per_byte and SimpleTokenCounter(1.0).at_most_a_token_per_byte
    assert ScriptAwareTokenCounter().at_most_a_token_per_byte and ScriptAwareTokenCounter(1).at_most_a_token_per_byte
    assert not SimpleTokenCounter(0.99).at_most_a_token_per_byte
    assert not ScriptAwareTokenCounter(0.5).at_most_a_token_per_byte
    assert count_request(standalone_request("é" * 300, ""), SimpleTokenCounter(0.25)) > 600


@pytest.mark.parametrize("counter", [SimpleTokenCounter(), ScriptAwareTokenCounter()], ids=["simple", "script-aware"])
def test_an_estimating_counter_does_not_count_a_request_far_within_its_budget(
    counter: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[object] = []

    def count_message(message: object) -> int:
        calls.append(message)
        return 1

    monkeypatch.setattr(counter, "count_message", count_message)
    request = standalone_request("请帮我看看这个问题 " * 100, "You summarize.")
    assert fits_budget(request, counter, 100_000)
    assert calls == []
    assert fits_budget(request, counter, 10)  # near or over the budget: counted (by the stub, 1 a message)
    assert calls
