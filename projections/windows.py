"""session_load's window and content rules (pure).

Follows the Go recall tool: negative sides become 0, both 0 means 1/1, the
span (before + after) is capped at 4 by shrinking the larger side (``after``
first on ties); content offsets are byte offsets snapped to UTF-8 boundaries.
An anchor's payload (its text, then each tool call's arguments) is paged as
one byte stream (:func:`slice_payload`): an answer holds at most the content
limit of it however many calls there are, and the next page's offset says
where to go on.
"""

from __future__ import annotations

from collections.abc import Sequence
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
    content_offset: int | None
    """Where the slice starts: in the text (``slice_content``), in the stream (``slice_payload``: ``None``
    for a part the page holds nothing of)."""
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


@dataclass(frozen=True)
class PayloadPage:
    """One page of a payload: its parts (an event's text, then each tool call's arguments) as one byte stream."""

    parts: tuple[ContentSlice, ...]
    """Each part's slice in this page (empty for a part the page does not reach or has passed), in order;
    ``content_offset`` is where the slice starts in the stream (what a request's ``content_offset`` names),
    ``None`` for a part the page holds nothing of, so no part names a position the page did not reach."""
    payload_bytes: int
    """Bytes of every part together."""
    next_offset: int | None
    """Where the next page starts in the stream (``None``: this page reaches the end)."""


def slice_payload(parts: Sequence[str], offset: int, limit: int) -> PayloadPage:
    """Bytes ``[offset, offset + limit)`` of ``parts``' UTF-8 bytes laid end to end: one page, capped as a whole.

    Each part's slice is snapped to its character starts as :func:`slice_content`
    snaps (so pages stepped by ``limit`` meet, and the pages ``next_offset`` leads
    through hold every byte once). A page holds at most ``limit`` bytes from the
    offset asked for, the bytes of a character it falls inside aside; when the limit
    is smaller than the character at the offset that one character is returned, so
    paging always moves on.
    """
    datas = [p.encode("utf-8") for p in parts]
    total = sum(len(d) for d in datas)
    pos = max(0, offset)
    stop = pos + limit
    slices: list[ContentSlice] = []
    base = 0
    end_at: int | None = None
    ended = False
    for data in datas:
        n = len(data)
        if n == 0:  # held by the page when the page reaches where it sits
            reached = pos <= base < stop and not ended
            slices.append(ContentSlice("", 0, base if reached else None, 0, False))
            continue
        if base + n <= pos or ended or base >= stop:  # passed: the page starts after it
            slices.append(ContentSlice("", n, None, 0, True))
        else:
            start = _snap_back(data, pos - base)
            end = _snap_back(data, min(stop - base, n))
            if end <= start and end_at is None:  # the page's first character: returned even past the limit
                end = start + 1
                while end < n and (data[end] & 0xC0) == 0x80:
                    end += 1
            if end <= start:  # the next character does not fit in what is left of the page
                ended = True
                slices.append(ContentSlice("", n, None, 0, True))
            else:
                chunk = data[start:end]
                slices.append(ContentSlice(chunk.decode("utf-8"), n, base + start, len(chunk), start > 0 or end < n))
                end_at = base + end
                ended = end < n
        base += n
    next_offset = end_at if end_at is not None and end_at < total else None
    return PayloadPage(tuple(slices), total, next_offset)
