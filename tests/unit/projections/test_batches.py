"""Cutting rows into batches (pure): every row once, in order, within the statement, byte and partition caps."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from projections.stage import MAX_BATCH_PARTITIONS, cut_batches

_BINDER: Any = object()


@given(
    st.lists(st.lists(st.lists(st.integers(1, 3000), min_size=1, max_size=40), max_size=30), max_size=4),
    st.integers(1, 130),
    st.integers(1, 20_000),
)
def test_batches_keep_every_row_in_order_within_the_caps(
    groups: list[list[list[int]]], max_statements: int, max_bytes: int
) -> None:
    rows = [[[(_BINDER, (g, p, r), n, size) for r, size in enumerate(part)] for p, part in enumerate(parts)]
            for g, parts in enumerate(groups) for n in [0]]  # fmt: skip
    batches = cut_batches(rows, max_statements, max_bytes)
    flat = [row for b in batches for _, row, _ in b.entries]
    assert flat == [row for parts in rows for part in parts for _, row, _, _ in part]
    sizes = {row: size for parts in rows for part in parts for _, row, _, size in part}
    for b in batches:
        assert b.entries and len(b.entries) <= max_statements
        assert b.size == sum(sizes[row] for _, row, _ in b.entries)
        assert b.size <= max_bytes or len(b.entries) == 1  # a single row larger than the cap goes alone
        assert len({row[0] for _, row, _ in b.entries}) == 1  # never across replica groups
        assert len({row[:2] for _, row, _ in b.entries}) <= MAX_BATCH_PARTITIONS
