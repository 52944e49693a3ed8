"""Word-level diff of two summary versions (pure), CJK-aware.

Latin-script text is compared word by word (whitespace and punctuation are
tokens of their own, so a changed comma does not mark its word). Chinese,
Japanese and Korean text has no spaces between words, so a "word" there would
be a whole sentence: every CJK character is its own token instead, and the
diff marks exactly the characters that changed.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Literal

Op = Literal["equal", "insert", "delete"]

_CJK = (
    "\u2e80-\u2fdf"  # radicals
    "\u3000-\u303f"  # CJK punctuation (、。「」…)
    "\u3040-\u30ff"  # hiragana, katakana
    "\u3100-\u312f\u31a0-\u31ff"  # bopomofo
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # Han
    "\uac00-\ud7af\u1100-\u11ff\u3130-\u318f"  # Hangul
    "\uff00-\uffef"  # full-width forms (，！？)
    "\U00020000-\U0003134f"  # Han extensions B-G
)
_TOKEN = re.compile(rf"[{_CJK}]|[^\W{_CJK}]+|\s+|[^\w\s{_CJK}]", re.UNICODE)


def tokenize(text: str) -> list[str]:
    """Words, single CJK characters, whitespace runs and single punctuation marks; ``"".join`` gives ``text``."""
    tokens = _TOKEN.findall(text)
    # Anything the pattern does not cover (none known) is kept so the text survives intact.
    if sum(map(len, tokens)) != len(text):
        return list(text)
    return tokens


@dataclass(frozen=True)
class DiffPart:
    """A run of text that is in both versions, only in the newer one, or only in the older one."""

    op: Op
    text: str


def word_diff(old: str, new: str) -> list[DiffPart]:
    """The parts turning ``old`` into ``new``, in reading order (a replacement: the deletion, then the insertion)."""
    a, b = tokenize(old), tokenize(new)
    parts: list[DiffPart] = []

    def add(op: Op, tokens: list[str]) -> None:
        text = "".join(tokens)
        if not text:
            return
        if parts and parts[-1].op == op:
            parts[-1] = DiffPart(op, parts[-1].text + text)
        else:
            parts.append(DiffPart(op, text))

    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            add("equal", a[i1:i2])
        else:
            add("delete", a[i1:i2])
            add("insert", b[j1:j2])
    return parts


def diff_counts(parts: list[DiffPart]) -> tuple[int, int]:
    """Characters inserted and deleted (whitespace excluded)."""
    inserted = sum(len("".join(p.text.split())) for p in parts if p.op == "insert")
    deleted = sum(len("".join(p.text.split())) for p in parts if p.op == "delete")
    return inserted, deleted
