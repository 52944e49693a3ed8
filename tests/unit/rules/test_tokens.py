"""Token counting: encodings by model, offline tiktoken, the simple counter, tool parts, the process-wide counter."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from schemas import Message
from streams.rules import tokens
from streams.rules.tokens import (
    SimpleTokenCounter,
    TiktokenCounter,
    TokenCounter,
    count_messages,
    encoding_name_for_model,
    get_token_counter,
    message_text_parts,
    seed_tiktoken_cache,
    set_token_counter,
)

CALL_ARGS = '{"query": "weather in Paris", "units": "metric"}'


def tool_call_message() -> Message:
    return Message.model_validate(
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "call_abc123", "type": "function", "function": {"name": "search", "arguments": CALL_ARGS}}
            ],
        }
    )


def tool_result_message(content: str) -> Message:
    return Message(role="tool", tool_call_id="call_abc123", name="search", content=content)


@pytest.mark.parametrize(
    "model",
    [
        "gpt-4o",
        "gpt-4o-mini",
        "GPT-4o-2024-08-06",
        "openai/gpt-4o",
        "chatgpt-4o-latest",
        "gpt-4.1",
        "gpt-4.1-mini",
        "gpt-5",
        "gpt-5-nano",
        "o1",
        "o3-mini",
        "o4-mini",
    ],
)
def test_o200k_families(model: str) -> None:
    assert encoding_name_for_model(model, "cl100k_base") == "o200k_base"


@pytest.mark.parametrize("model", ["gpt-4", "gpt-4-turbo", "gpt-4-0613", "gpt-3.5-turbo", "azure/gpt-3.5-turbo-16k"])
def test_cl100k_families(model: str) -> None:
    assert encoding_name_for_model(model, "o200k_base") == "cl100k_base"


@pytest.mark.parametrize("model", [None, "", "llama-3.1-8b", "claude-3-5-sonnet", "mistral-large"])
def test_unknown_models_use_the_configured_default(model: str | None) -> None:
    assert encoding_name_for_model(model) == "o200k_base"
    assert encoding_name_for_model(model, "cl100k_base") == "cl100k_base"
    counter = TiktokenCounter(model, "cl100k_base")
    assert counter.encoding_name == "cl100k_base" and counter.name == "tiktoken:cl100k_base"


def test_tiktoken_counter_picks_the_encoding_of_its_model() -> None:
    assert TiktokenCounter("gpt-4o").name == "tiktoken:o200k_base"
    assert TiktokenCounter("gpt-3.5-turbo", "o200k_base").name == "tiktoken:cl100k_base"
    # The two encodings really differ on the same text.
    text = "Summaries keep decisions, constraints and open tasks — 日本語のテキストも。"
    assert TiktokenCounter("gpt-4o").count_text(text) != TiktokenCounter("gpt-4").count_text(text)


def test_seeded_cache_loads_tiktoken_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tiktoken
    import tiktoken.load
    from tiktoken_ext import openai_public  # type: ignore[import-untyped]

    def no_network(blobpath: str) -> bytes:
        raise AssertionError(f"tiktoken tried to download {blobpath}")

    cache = tmp_path / "tiktoken"
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache))
    monkeypatch.setattr(tiktoken.load, "read_file", no_network)
    assert seed_tiktoken_cache() == cache
    for url in tokens._TIKTOKEN_URLS.values():
        assert (cache / hashlib.sha1(url.encode()).hexdigest()).is_file()
    # A fresh encoding (not tiktoken's registry cache) loads from the seeded files;
    # tiktoken checks their sha256 against its expected hashes.
    for constructor in (openai_public.cl100k_base, openai_public.o200k_base):
        encoding = tiktoken.Encoding(**constructor())
        assert encoding.decode(encoding.encode_ordinary("hello offline world")) == "hello offline world"
    # Seeding again is a no-op on existing files.
    assert seed_tiktoken_cache(cache) == cache


def test_processes_seeding_one_empty_cache_at_once_all_succeed(tmp_path: Path) -> None:
    # Seen on a fresh clone: two pytest-xdist workers seeded ~/.cache/distill/tiktoken at once through one
    # shared temporary name, and the second one's rename found it gone (FileNotFoundError at collection).
    script = "import sys; from streams.rules.tokens import seed_tiktoken_cache; seed_tiktoken_cache(sys.argv[1])"
    root = Path(__file__).resolve().parents[3]
    for attempt in range(3):
        cache = tmp_path / f"cache{attempt}"
        procs = [
            subprocess.Popen([sys.executable, "-c", script, str(cache)], cwd=root, stderr=subprocess.PIPE, text=True)
            for _ in range(6)
        ]
        errors = [p.communicate(timeout=60)[1] for p in procs]
        assert [p.returncode for p in procs] == [0] * 6, "\n".join(errors)
        names = sorted(f.name for f in cache.iterdir())
        assert names == sorted(hashlib.sha1(u.encode()).hexdigest() for u in tokens._TIKTOKEN_URLS.values())


def test_seeding_sets_the_cache_dir_only_when_unset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    seed_tiktoken_cache(tmp_path / "a")
    assert os.environ["TIKTOKEN_CACHE_DIR"] == str(tmp_path / "a")
    seed_tiktoken_cache(tmp_path / "b")
    assert os.environ["TIKTOKEN_CACHE_DIR"] == str(tmp_path / "a")
    assert any((tmp_path / "b").iterdir())


def test_simple_counter_divides_runes_by_the_parameter() -> None:
    text = "x" * 40
    assert SimpleTokenCounter().count_text(text) == 10  # default 4.0 runes per token
    assert SimpleTokenCounter(2.0).count_text(text) == 20  # fewer runes per token: more tokens
    assert SimpleTokenCounter(8.0).count_text(text) == 5
    assert SimpleTokenCounter(0.5).count_text(text) == 80
    assert SimpleTokenCounter(4.0).count_text("x" * 11) == 2  # truncated, not rounded
    assert SimpleTokenCounter(4.0).count_text("日本語のテキスト") == 2  # runes, not bytes
    assert SimpleTokenCounter(3.0).count_length(9) == 3 == SimpleTokenCounter(3.0).count_text("x" * 9)
    for bad in (0.0, -1.0):
        with pytest.raises(ValueError, match="approx_runes_per_token"):
            SimpleTokenCounter(bad)


@pytest.mark.parametrize("counter", [SimpleTokenCounter(), SimpleTokenCounter(100.0), TiktokenCounter("gpt-4o")])
def test_non_empty_counts_at_least_one_empty_counts_zero(counter: TokenCounter) -> None:
    assert isinstance(counter, TokenCounter)
    assert counter.count_text("") == 0
    assert counter.count_message(Message(role="assistant", content="a")) == 1
    assert counter.count_message(Message(role="assistant", content="")) == 0
    assert counter.count_message(Message(role="assistant")) == 0
    if isinstance(counter, SimpleTokenCounter):
        assert counter.count_text("a") == 1 and counter.count_length(1) == 1 and counter.count_length(0) == 0


def test_tool_call_parts_count_type_id_name_and_arguments() -> None:
    message = tool_call_message()
    parts = list(message_text_parts(message))
    assert parts == ["function", "call_abc123", "search", CALL_ARGS]
    simple = SimpleTokenCounter()
    assert simple.count_message(message) == int(sum(len(p) for p in parts) / 4.0)
    tik = TiktokenCounter("gpt-4o")
    assert tik.count_message(message) == sum(tik.count_text(p) for p in parts)
    # Each part contributes: without arguments the count drops by the arguments' tokens.
    no_args = Message.model_validate(
        {
            "role": "assistant",
            "tool_calls": [{"id": "call_abc123", "type": "function", "function": {"name": "search"}}],
        }
    )
    assert list(message_text_parts(no_args)) == ["function", "call_abc123", "search"]
    assert tik.count_message(message) - tik.count_message(no_args) == tik.count_text(CALL_ARGS)


def test_tool_result_counts_through_its_content() -> None:
    content = "Paris: 18°C, light rain, wind 12 km/h from the south-west."
    result = tool_result_message(content)
    assert list(message_text_parts(result)) == [content]  # not the call id or tool name
    for counter in (SimpleTokenCounter(), TiktokenCounter("gpt-4o")):
        assert counter.count_message(result) == counter.count_text(content)
    assert SimpleTokenCounter().count_message(tool_result_message("")) == 0


def test_reasoning_content_counts_with_content() -> None:
    message = Message(role="assistant", content="x" * 8, reasoning_content="y" * 12)
    assert list(message_text_parts(message)) == ["x" * 8, "y" * 12]
    assert SimpleTokenCounter().count_message(message) == 5


class FixedCounter:
    name = "fixed"

    def count_text(self, text: str) -> int:
        return 7 if text else 0

    def count_message(self, message: Message) -> int:
        return 7


def test_set_token_counter_and_reset_with_none() -> None:
    before = get_token_counter()
    messages = [Message(role="user", content="x" * 40), tool_result_message("y" * 8)]
    try:
        fixed = FixedCounter()
        set_token_counter(fixed)
        assert get_token_counter() is fixed
        assert count_messages(messages) == 14
        # An injected counter wins over the process-wide one.
        assert count_messages(messages, SimpleTokenCounter()) == 12
        set_token_counter(None)
        reset = get_token_counter()
        assert isinstance(reset, SimpleTokenCounter) and reset.approx_runes_per_token == 4.0
        assert count_messages(messages) == 12
    finally:
        set_token_counter(before)
