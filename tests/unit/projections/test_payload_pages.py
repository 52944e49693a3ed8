"""``session_load``'s pages of an anchor's payload (``windows.slice_payload``): its text, then every tool call's
arguments, as one byte stream. An answer holds at most the content limit of it, however many calls there are and
however large their arguments; following ``next_offset`` reaches every byte (ASCII, CJK, emoji) exactly once."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from projections.windows import slice_content, slice_payload

_TEXTS = st.text(alphabet='aZ {}":,中文字😀\u0301한', max_size=400)


def _follow(parts: list[str], limit: int) -> tuple[list[str], list[int]]:
    """Every page from offset 0 on, as an agent follows ``next_offset``: each part joined, each page's size."""
    got = ["" for _ in parts]
    sizes: list[int] = []
    offset: int | None = 0
    while offset is not None:
        page = slice_payload(parts, offset, limit)
        sizes.append(sum(p.returned_bytes for p in page.parts))
        for n, piece in enumerate(page.parts):
            got[n] += piece.text
        assert page.next_offset is None or page.next_offset > offset
        offset = page.next_offset
        assert len(sizes) <= sum(len(p.encode()) for p in parts) + 1
    return got, sizes


@settings(max_examples=300)
@given(st.lists(_TEXTS, min_size=1, max_size=6), st.integers(1, 300))
def test_following_the_pages_reaches_every_byte_once_and_no_page_exceeds_the_limit(
    parts: list[str], limit: int
) -> None:
    got, sizes = _follow(parts, limit)
    assert got == parts
    assert all(size <= max(limit, 4) for size in sizes), sizes  # one character when the limit is smaller than it
    if limit >= 4:
        assert all(size <= limit for size in sizes)


def test_huge_arguments_of_many_calls_are_paged_within_the_limit_ascii_and_cjk() -> None:
    text = "calling the tools now"
    ascii_args = '{"rows": "' + "0123456789" * 20_000 + '"}'
    cjk_args = '{"备注": "' + "订单编号一二三" * 10_000 + '"}'
    parts = [text, ascii_args, cjk_args, "{}", ascii_args[:70_000]]
    limit = 16 * 1024
    got, sizes = _follow(parts, limit)
    assert got == parts
    assert max(sizes) <= limit
    assert sum(sizes) == sum(len(p.encode()) for p in parts)
    first = slice_payload(parts, 0, limit)
    assert first.payload_bytes == sum(len(p.encode()) for p in parts)
    assert [p.returned_bytes for p in first.parts] == [len(text), limit - len(text), 0, 0, 0]
    assert first.parts[2].truncated and first.parts[3].text == "" and first.next_offset == limit


@given(st.lists(_TEXTS, min_size=1, max_size=5), st.integers(1, 70))
def test_pages_stepped_by_the_limit_asked_for_skip_no_byte(parts: list[str], limit: int) -> None:
    """An agent stepping its offset by its limit (the tool's description invites it) sees every byte too."""
    total = sum(len(p.encode()) for p in parts)
    seen = bytearray(total)
    for offset in range(0, total, limit):
        for piece in slice_payload(parts, offset, limit).parts:
            if piece.content_offset is not None:  # a stream position
                seen[piece.content_offset : piece.content_offset + piece.returned_bytes] = (
                    b"\x01" * piece.returned_bytes
                )
    assert all(seen)


@given(st.text(max_size=300), st.integers(0, 1200), st.integers(1, 400))
def test_a_single_part_pages_as_slice_content(text: str, offset: int, limit: int) -> None:
    [part] = slice_payload([text], offset, limit).parts
    alone = slice_content(text, offset, limit)
    held = alone.content_offset if alone.returned_bytes or (not text and offset == 0) else None  # held nothing
    assert (part.text, part.content_offset, part.returned_bytes, part.truncated) == (
        alone.text, held, alone.returned_bytes, alone.truncated,
    )  # fmt: skip


def _parts_with_calls() -> list[str]:
    return ["先看一下订单。", '{"id": "订单-1", "rows": "' + "x" * 50 + '"}', "{}", '{"q": "😀' + "y" * 30 + '"}']


def test_each_part_of_a_page_names_where_its_slice_sits_in_the_stream_or_nothing() -> None:
    parts = _parts_with_calls()
    data = "".join(parts).encode()
    bases = [len("".join(parts[:n]).encode()) for n in range(len(parts))]
    offset: int | None = 0
    seen = bytearray(len(data))
    while offset is not None:
        page = slice_payload(parts, offset, 20)
        for n, piece in enumerate(page.parts):
            if piece.returned_bytes == 0:
                # not held: no position the page did not reach (an empty part the page passes over aside)
                assert piece.content_offset is None or (not parts[n] and piece.content_offset == bases[n])
                continue
            assert piece.content_offset is not None and piece.content_offset >= offset
            at = piece.content_offset
            assert data[at : at + piece.returned_bytes] == piece.text.encode()
            assert not any(seen[at : at + piece.returned_bytes])
            seen[at : at + piece.returned_bytes] = b"\x01" * piece.returned_bytes
        offset = page.next_offset
    assert all(seen)


def test_a_call_the_page_does_not_reach_reports_no_position() -> None:
    # With within-part offsets such a call said ``arguments_offset=0, returned_bytes=0``, and a client
    # paging by ``arguments_offset + returned_bytes`` asked for the first page again forever.
    parts = _parts_with_calls()
    page = slice_payload(parts, 0, 20)
    assert page.parts[0].returned_bytes > 0
    assert [(p.content_offset, p.returned_bytes) for p in page.parts[1:]] == [(None, 0)] * 3
    text_bytes = len(parts[0].encode())
    later = slice_payload(parts, text_bytes + 5, 20)
    assert later.parts[0].content_offset is None  # passed: nothing of it held either
    assert later.parts[1].content_offset == text_bytes + 5  # a stream position, not one within the call
