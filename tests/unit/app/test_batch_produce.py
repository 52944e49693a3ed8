"""Grouping a batch's outgoing records by partition keeps each partition's order (pure)."""

from __future__ import annotations

from streams.app.batch_produce import group_by_partition


def test_groups_keep_the_order_of_each_partition() -> None:
    records = [("cl", b"a", b"1", 0), ("jobs", b"a", b"j", 0), ("cl", b"b", None, 1), ("cl", b"a", b"2", 0),
               ("cl", b"c", "三".encode(), 1)]  # fmt: skip
    groups = group_by_partition(records)
    assert groups == {("cl", 0): [(b"a", b"1"), (b"a", b"2")], ("jobs", 0): [(b"a", b"j")],
                      ("cl", 1): [(b"b", None), (b"c", "三".encode())]}  # fmt: skip
    assert list(groups) == [("cl", 0), ("jobs", 0), ("cl", 1)]  # first appearance
