"""A hit's one-line snippet (``lexical.compact``): the prefix shortcut cuts exactly as flattening the whole text."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from projections.lexical import compact


def _whole(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    if not flat:
        return "<empty>"
    return flat if len(flat) <= limit else flat[: max(limit - 3, 0)] + "..."


_PIECES = st.sampled_from(["word", "词语", "  ", "\n\t", " ", "a", "工具结果", "x" * 40, "\u3000", "\r\n"])


@settings(max_examples=400)
@given(st.lists(_PIECES, max_size=400), st.integers(min_value=1, max_value=300))
def test_the_cut_is_the_whole_texts(pieces: list[str], limit: int) -> None:
    text = "".join(pieces)
    assert compact(text, limit) == _whole(text, limit)


def test_long_whitespace_before_the_text_and_a_text_exactly_at_the_limit() -> None:
    assert compact(" " * 5000 + "深处的细节 detail", 20) == "深处的细节 detail"
    assert compact("x" * 280 + " " * 3000) == "x" * 280
    assert compact("x" * 280 + " " * 3000 + "y") == "x" * 277 + "..."
    assert compact(" \n\t " * 1000) == "<empty>"
