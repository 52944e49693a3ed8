"""The Python guide's ``max_summary_length``: a character cap that respects sentences, words and characters.

The invariant here: a capped summary is never empty and never a bare
ellipsis while the text has content, since the capped text rolls forward
as the previous summary (the only copy of what lies before the boundary).
"""

from __future__ import annotations

import re
import unicodedata

from projections.textcut import head_end, is_boundary

ELLIPSIS = "…"
_CLOSERS = "\"'”’」』）)\\]】》〉»›"
# Full-width ends close a sentence whatever follows (CJK text has no space after them);
# ASCII ends only when no letter or digit follows (not in "3.5", "v1.2" or "example.com").
# A run of ends ("?!", "...") and the closing quotes or brackets after it stay with the sentence.
# "；" and "…" are not sentence ends: a cut there leaves a clause hanging.
_SENTENCE_END = re.compile(rf"(?:[。！？．｡।؟۔]+|[.!?]+(?=[{_CLOSERS}]*(?![A-Za-z0-9])))[{_CLOSERS}]*")


def cap_length(text: str, max_chars: int | None) -> str:
    """``text`` cut to at most ``max_chars`` characters (code points).

    The cut falls after the last sentence end (``。！？.!?`` and their kin,
    with any closing quotes or brackets) that fits; without one, at the last
    word boundary when that keeps at least half the room (spaced text);
    else at a character boundary, never inside a combining sequence, emoji
    sequence, flag or decomposed Hangul syllable (the rule payload cuts use
    too, :func:`~projections.textcut.is_boundary`). The last two are
    marked with an ellipsis. A text with content never becomes empty or a
    bare ellipsis: in the degenerate case of a cap too small for one
    character and the ellipsis, the first character (with its combining
    marks) is kept.
    """
    if not max_chars or len(text) <= max_chars:
        return text
    ends = [m.end() for m in _SENTENCE_END.finditer(text, 0, max_chars + 1) if m.end() <= max_chars]
    ends = [end for end in ends if is_boundary(text, end)]
    for end in reversed(ends):
        head = text[:end].rstrip()
        if _has_content(head):
            return head
    room = max_chars - len(ELLIPSIS)
    spaces = [i for i in range(min(room, len(text)), 0, -1) if text[i].isspace()]
    if spaces and spaces[0] >= room // 2:
        head = text[: spaces[0]].rstrip()
        if _has_content(head):
            return head + ELLIPSIS
    head = text[: head_end(text, room)].rstrip()
    if _has_content(head):
        return head + ELLIPSIS
    first = 1
    while not is_boundary(text, first):
        first += 1
    return text[:first]


def _has_content(text: str) -> bool:
    return any(unicodedata.category(c)[0] in "LNS" for c in text)
