"""A hit's one-line snippet and context line (``lexical.compact``, ``lexical.context_line``, stored in
``recall_lines``): the prefix shortcut cuts exactly as flattening the whole text, and a cut never splits a
character a reader sees as one (an emoji ZWJ sequence, a combining mark, a flag, Hangul jamo)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from projections.lexical import LINE_CHARS, compact, context_line
from projections.rows import recall_rows
from projections.textcut import is_boundary
from tests.unit.projections.test_rows import _event

FAMILY = "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466"
"""👨‍👩‍👧‍👦: seven code points, one character."""
ACCENTED = "e\u0301\u0323"
"""e with two combining marks."""
FLAG = "\U0001f1ef\U0001f1f5"
JAMO = "\u1100\u1161\u11a8"
"""각, spelled with conjoining jamo."""


def _whole(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    if not flat:
        return "<empty>"
    if len(flat) <= limit:
        return flat
    end = max(limit - 3, 0)
    while end > 0 and not is_boundary(flat, end):
        end -= 1
    return flat[:end] + "..."


_PIECES = st.sampled_from(["word", "词语", "  ", "\n\t", " ", "a", "工具结果", "x" * 40, "\u3000", "\r\n",
                           FAMILY, ACCENTED, FLAG, JAMO, "\U0001f44d\U0001f3fd"])  # fmt: skip


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


def _cut_is_whole(line: str, text: str, limit: int) -> None:
    flat = " ".join(text.split())
    assert len(line) <= limit
    if line == flat:
        return
    kept = line.removesuffix("...")
    assert line.endswith("...") and flat.startswith(kept) and is_boundary(flat, len(kept)), (line, limit)


def test_a_context_line_never_splits_an_emoji_sequence_a_combining_mark_a_flag_or_jamo() -> None:
    for cluster in (FAMILY, ACCENTED, FLAG, JAMO):
        for before in range(LINE_CHARS - len(cluster) - 4, LINE_CHARS):
            text = "前" * before + cluster * 3 + " 之后的文字 tail"
            line = context_line(text)
            _cut_is_whole(line, text, LINE_CHARS)
            assert cluster[:1] not in line or cluster in line, (before, line)
    # CJK text has no spaces: a cut between any two of its characters is whole, and the line is full.
    text = "前" * 200
    assert context_line(text) == "前" * (LINE_CHARS - 3) + "..."


def test_the_stored_context_line_of_a_document_keeps_its_emoji_whole() -> None:
    text = "x" * (LINE_CHARS - 5) + FAMILY + " and the rest of a long tool result " * 50
    rows = recall_rows(_event(text), 0)
    assert rows is not None
    line = rows.line[6]
    assert isinstance(line, str) and line == "x" * (LINE_CHARS - 5) + "..."
    _cut_is_whole(line, text, LINE_CHARS)
