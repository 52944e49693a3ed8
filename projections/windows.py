"""session_load's window and content rules (pure).

Follows the Go recall tool: negative sides become 0, both 0 means 1/1, the
span (before + after) is capped at 4 by shrinking the larger side (``after``
first on ties); content offsets are byte offsets snapped to UTF-8 boundaries.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_BEFORE = 1
DEFAULT_AFTER = 1
MAX_SPAN = 4
DEFAULT_CONTENT_LIMIT = 16 * 1024
MAX_CONTENT_LIMIT = 64 * 1024


def normalize_window(before: int | None, after: int | None) -> tuple[int, int]:
    """``(before, after)`` after defaults, clamping and the span cap. An explicit zero side is kept."""
    # Clamping each side to the span first gives the same result as the loop alone
    # (it only ever shrinks the larger side) and keeps the loop short for huge inputs.
    b = DEFAULT_BEFORE if before is None else min(max(0, before), MAX_SPAN)
    a = DEFAULT_AFTER if after is None else min(max(0, after), MAX_SPAN)
    if b == 0 and a == 0:
        return DEFAULT_BEFORE, DEFAULT_AFTER
    while b + a > MAX_SPAN:
        if a >= b:
            a -= 1
        else:
            b -= 1
    return b, a


def normalize_content(offset: int | None, limit: int | None) -> tuple[int, int]:
    """``(offset, limit)`` in bytes: offset ≥ 0; limit ≤ 0 or absent → 16 KiB; at most 64 KiB."""
    off = max(0, offset or 0)
    lim = DEFAULT_CONTENT_LIMIT if limit is None or limit <= 0 else min(limit, MAX_CONTENT_LIMIT)
    return off, lim


def _snap_back(data: bytes, pos: int) -> int:
    """The largest UTF-8 character start ≤ ``pos`` (continuation bytes are ``10xxxxxx``)."""
    pos = min(max(pos, 0), len(data))
    while 0 < pos < len(data) and (data[pos] & 0xC0) == 0x80:
        pos -= 1
    return pos


@dataclass(frozen=True)
class ContentSlice:
    """A byte window of a text: the decoded slice and where it sits."""

    text: str
    content_bytes: int
    content_offset: int
    returned_bytes: int
    truncated: bool


def slice_content(text: str, offset: int, limit: int) -> ContentSlice:
    """Bytes ``[offset, offset + limit)`` of ``text`` in UTF-8, both ends snapped back to a character start.

    ``truncated`` is true when anything of the text lies outside the slice.
    """
    data = text.encode("utf-8")
    start = _snap_back(data, offset)
    # From the offset asked for, not the snapped start: an agent stepping its offset by its limit
    # then gets pages that meet (measured from the start, the bytes of the character the start was
    # snapped back over were skipped at every page edge inside CJK text).
    end = _snap_back(data, offset + limit)
    if end == start and start < len(data):
        # A limit smaller than one character still returns that character.
        end = start + 1
        while end < len(data) and (data[end] & 0xC0) == 0x80:
            end += 1
    chunk = data[start:end]
    return ContentSlice(
        text=chunk.decode("utf-8"),
        content_bytes=len(data),
        content_offset=start,
        returned_bytes=len(chunk),
        truncated=start > 0 or end < len(data),
    )
