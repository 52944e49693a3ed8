"""``projections.textcut`` against an independent oracle: the extended grapheme clusters of Unicode's UAX #29
(the ``regex`` module's ``\\X``). Every cut point textcut allows is a cluster boundary, for text of the scripts
and sequences a session holds (CJK, kana, Hangul in syllables and conjoining jamo, emoji ZWJ sequences, flags,
skin tones, keycaps, combining marks, Indic conjuncts, CRLF line ends)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from projections.textcut import head_and_tail, is_boundary

regex = pytest.importorskip("regex")

UNITS = (
    "数据库", "東京の倉庫", "カタカナ", "서울", "\u1112\u1161\u11ab\u1100\u1173\u11af", "👩\u200d👩\u200d👧\u200d👦",
    "🇯🇵🇰🇷", "👍🏽", "1\ufe0f\u20e3", "❤\ufe0f", "e\u0301", "a\u0308\u0323", "नमस्ते", "क्षत्रिय", "স্ত্রী",
    "ક્ષ", "ଷ୍ଟ", "శ్రీ", "ന്റെ", "क्", "ক", "ত", "line\r\nnext", "\r\n", "ok ", "\\udce9",
)  # fmt: skip


def _clusters(text: str) -> set[int]:
    return {0, *(m.end() for m in regex.finditer(r"\X", text))}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(UNITS), min_size=1, max_size=30))
def test_every_cut_point_is_a_grapheme_cluster_boundary(units: list[str]) -> None:
    text = "".join(units)
    allowed = {i for i in range(len(text) + 1) if is_boundary(text, i)}
    assert allowed <= _clusters(text), [(i, text[max(0, i - 3) : i + 3]) for i in sorted(allowed - _clusters(text))]


@pytest.mark.parametrize("text", ["ab\r\ncd" * 3, "नमस्ते " * 5, "क्षत्रिय" * 4, "ന്റെ" * 6])
def test_head_and_tail_keep_line_ends_and_conjuncts_whole(text: str) -> None:
    clusters = _clusters(text)
    for keep in range(1, len(text)):
        head, tail = head_and_tail(text, keep)
        assert len(head) in clusters and len(text) - len(tail) in clusters, (keep, head[-3:], tail[:3])


def test_cjk_and_emoji_text_still_cuts_at_every_cluster() -> None:
    """The rule refuses no cluster boundary of the text a session usually holds (a cut keeps as much as it can)."""
    rng = random.Random(3)
    text = "".join(rng.choice(UNITS[:12]) for _ in range(200))
    assert {i for i in range(len(text) + 1) if is_boundary(text, i)} == _clusters(text)


def test_a_letter_of_another_indic_script_after_a_virama_is_not_cut_off() -> None:
    """Devanagari consonant + virama + Bengali consonant is one cluster by UAX #29 (before: cut between)."""
    text = "क्ক"
    assert not is_boundary(text, 2) and 2 not in _clusters(text)
