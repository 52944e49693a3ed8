"""The Python guide's ``max_summary_length``: a character cap that respects sentences and words."""

from __future__ import annotations

import re

ELLIPSIS = "…"
_SENTENCE_END = re.compile(r"[.!?。！？](?=\s|$)")


def cap_length(text: str, max_chars: int | None) -> str:
    """``text`` cut to at most ``max_chars`` characters.

    The cut falls after the last complete sentence that fits; without one,
    at the last word boundary, marked with an ellipsis. A word is never cut
    in two (a single overlong word yields just the ellipsis).
    """
    if not max_chars or len(text) <= max_chars:
        return text
    ends = [m.end() for m in _SENTENCE_END.finditer(text) if m.end() <= max_chars]
    if ends:
        return text[: ends[-1]].rstrip()
    room = text[:max_chars]
    cut = max(room.rfind(" "), room.rfind("\n"))
    head = room[:cut].rstrip() if cut > 0 else ""
    return (head + ELLIPSIS) if head else ELLIPSIS[:max_chars]
