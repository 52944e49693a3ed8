"""A hit's snippet shows the text around the matched terms (``snippets.excerpt``), cut on character boundaries."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from projections.snippets import context_window, excerpt
from projections.textcut import is_boundary

_LOG = "".join(f"line {i:05d}: worker restarted, queue depth {i * 7} ok\n" for i in range(800))
_ZH = "数据库连接池在夜间批处理时耗尽，重试队列不断增长。" * 700


def _deep(filler: str, fact: str, at: float) -> str:
    cut = int(len(filler) * at)
    return filler[:cut] + fact + filler[cut:]


def test_a_fact_deep_in_a_large_ascii_result_is_shown() -> None:
    text = _deep(_LOG, " the vault passcode is ZEBRA-7731 for bay 12 ", 0.73)
    snippet = excerpt(text, "vault passcode", 280)
    assert "the vault passcode is ZEBRA-7731 for bay 12" in snippet
    assert len(snippet) <= 280 and snippet.startswith("...") and snippet.endswith("...")
    assert not excerpt(_LOG, "vault passcode", 280).startswith("...")  # no match: the start of the text


def test_a_fact_deep_in_a_large_chinese_result_is_shown() -> None:
    text = _deep(_ZH, "保险库的密码是斑马七七三一号", 0.61)
    snippet = excerpt(text, "保险库密码", 96)
    assert "保险库的密码是斑马七七三一号" in snippet and len(snippet) <= 96
    mixed = _deep(_ZH, "订单号是ORDER98765，已退款", 0.9)
    assert "订单号是ORDER98765，已退款" in excerpt(mixed, "order98765 退款", 120)
    # Full-width letters typed with an IME fold to ASCII (NFKC): the window still lands on the fact.
    wide = _deep(_ZH, "编号ＡＢＣ４２已发货", 0.5)
    assert "编号ＡＢＣ４２已发货" in excerpt(wide, "abc42", 60)


def test_the_window_holding_the_most_keywords_wins() -> None:
    text = "vault " + "x " * 500 + "the vault passcode ZEBRA " + "y " * 500
    assert "the vault passcode ZEBRA" in excerpt(text, "vault passcode zebra", 80)


def test_short_and_blank_texts() -> None:
    assert excerpt("  short\n text ", "text", 280) == "short text"
    assert excerpt(" \n ", "x", 280) == "<empty>"


def test_ends_fall_between_words_and_characters() -> None:
    flags = "🇫🇷🇩🇪" * 200
    text = flags + " 付款成功 payment ok " + "e\u0301" * 300
    snippet = excerpt(text, "payment", 40)
    body = snippet.removeprefix("...").removesuffix("...")
    at = text.find(body)
    assert at >= 0 and is_boundary(text, at) and is_boundary(text, at + len(body))
    words = excerpt("alpha " * 100 + "needle " + "omega " * 100, "needle", 50)
    assert all(w in ("alpha", "needle", "omega") for w in words.strip(".").split())


_PIECES = st.sampled_from(["word", "词语", " ", "\n", "e\u0301", "👍🏽", "工具结果", "x" * 40, "ＡＢ", "İ"])


@settings(max_examples=300)
@given(st.lists(_PIECES, max_size=300), st.integers(min_value=0, max_value=299), st.integers(10, 300))
def test_a_planted_fact_is_always_shown_whole(pieces: list[str], at: int, limit: int) -> None:
    fact = "MARK1234"
    at = min(at, len(pieces))
    text = "".join(pieces[:at]) + f" {fact} " + "".join(pieces[at:])
    snippet = excerpt(text, fact.lower(), max(limit, 3 * len(fact)))
    assert fact in snippet and len(snippet) <= max(limit, 3 * len(fact))


def test_context_window_keeps_the_match_line_whole() -> None:
    match = "[match] tool: ..." + "事实" * 60 + "..."
    before = ["user: " + "前文" * 80, "assistant: 好的"]
    after = ["user: " + "后文" * 80]
    window = context_window(before, match, after, 280)
    lines = window.split("\n")
    assert len(window) <= 280 and lines[2] == match and lines[1] == "assistant: 好的"
    assert lines[0].startswith("user: 前文") and lines[0].endswith("...") and lines[3].endswith("...")
    assert context_window([], "[match] user: hi", ["assistant: hello"], 280) == "[match] user: hi\nassistant: hello"
