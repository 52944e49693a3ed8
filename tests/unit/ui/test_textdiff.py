"""The summary diff: words in Latin text, characters in CJK text, and the text always survives intact."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from streams.ui.textdiff import DiffPart, diff_counts, tokenize, word_diff


def _old(parts: list[DiffPart]) -> str:
    return "".join(p.text for p in parts if p.op != "insert")


def _new(parts: list[DiffPart]) -> str:
    return "".join(p.text for p in parts if p.op != "delete")


def test_a_changed_latin_word_is_marked_whole() -> None:
    parts = word_diff("Booked flight TP1350 for 412 EUR.", "Booked flight TP1352 for 412 EUR.")
    assert [p for p in parts if p.op != "equal"] == [DiffPart("delete", "TP1350"), DiffPart("insert", "TP1352")]


def test_punctuation_is_its_own_token() -> None:
    parts = word_diff("Lisbon, Sintra", "Lisbon; Sintra")
    assert [p for p in parts if p.op != "equal"] == [DiffPart("delete", ","), DiffPart("insert", ";")]


def test_chinese_text_diffs_per_character_not_per_sentence() -> None:
    old = "用户预订了里斯本的酒店，预算两千五百欧元。"
    new = "用户取消了里斯本的酒店，预算两千五百欧元。"
    parts = word_diff(old, new)
    # Without CJK tokenization the whole sentence is one "word" and would be replaced whole.
    assert [p for p in parts if p.op != "equal"] == [DiffPart("delete", "预订"), DiffPart("insert", "取消")]
    assert diff_counts(parts) == (2, 2)


def test_japanese_and_korean_are_split_too() -> None:
    assert tokenize("ホテルを予約") == list("ホテルを予約")
    assert tokenize("호텔 예약") == ["호", "텔", " ", "예", "약"]


def test_mixed_script_keeps_latin_words_inside_cjk_text() -> None:
    assert tokenize("已预订 Arkhe，5月14日") == ["已", "预", "订", " ", "Arkhe", "，", "5", "月", "14", "日"]


def test_first_version_is_all_inserted() -> None:
    assert word_diff("", "新的摘要") == [DiffPart("insert", "新的摘要")]


@given(st.text(), st.text())
def test_the_diff_rebuilds_both_versions(old: str, new: str) -> None:
    parts = word_diff(old, new)
    assert _old(parts) == old
    assert _new(parts) == new
    assert "".join(tokenize(old)) == old
