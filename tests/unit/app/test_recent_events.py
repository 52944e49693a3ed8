"""The recent-records window the event-log reader answers from before scanning Kafka."""

from __future__ import annotations

import random

from streams.app.event_log import Located, RawEvent, RecentEvents


def test_a_covered_range_is_answered_with_the_keys_records() -> None:
    recent = RecentEvents()
    for offset in range(10, 20):
        recent.add(0, offset, b"a" if offset % 2 else b"b", f"v{offset}".encode())
    assert recent.read(0, 11, 15, b"a") == [RawEvent(11, b"v11"), RawEvent(13, b"v13"), RawEvent(15, b"v15")]
    assert recent.read(0, 12, 19, b"zzz") == []
    assert recent.read(0, 9, 15, b"a") is None  # before the window
    assert recent.read(0, 15, 20, b"a") is None  # not consumed yet
    assert recent.read(1, 15, 15, b"a") is None  # another partition


def test_eviction_moves_the_window_and_redelivery_or_reassignment_starts_over() -> None:
    recent = RecentEvents(max_bytes=3 * (1 + 2 + 96))
    for offset in range(5):
        recent.add(0, offset, b"k", b"vv")
    assert recent.read(0, 1, 4, b"k") is None
    assert recent.read(0, 2, 4, b"k") == [RawEvent(2, b"vv"), RawEvent(3, b"vv"), RawEvent(4, b"vv")]
    recent.add(0, 3, b"k", b"vv")  # re-delivered from an earlier offset
    assert recent.read(0, 3, 3, b"k") == [RawEvent(3, b"vv")] and recent.read(0, 2, 3, b"k") is None
    recent.reset({0})
    assert recent.read(0, 3, 3, b"k") is None


def _interleaved(recent: RecentEvents, sessions: int, per_session: int, start: int = 0) -> None:
    """Event n of every session, then n + 1 (offsets from ``start``)."""
    offset = start
    for n in range(per_session):
        for s in range(sessions):
            recent.add(0, offset, f"s{s}".encode(), f"s{s}-e{n}".encode())
            offset += 1


def test_past_the_byte_budget_a_key_is_located_by_its_own_offsets() -> None:
    # 100 sessions interleaved; values held only for the last ~20 records.
    recent = RecentEvents(max_bytes=20 * (2 + 6 + 96))
    _interleaved(recent, 100, 10)
    assert recent.read(0, 7, 999, b"s7") is None  # the values window no longer covers it
    found = recent.locate(0, 7, 999, b"s7")
    assert found is not None and found.scan_end is None
    # the offsets of s7's records only (not the 993 other records of the stretch), values not held
    assert found.fetch == [7 + 100 * n for n in range(10)]
    assert found.cached == []
    # the newest records of a key still held come from memory
    tail = recent.locate(0, 990, 999, b"s99")
    assert tail is not None and tail.fetch == [] and tail.cached == [RawEvent(999, b"s99-e9")]
    mixed = recent.locate(0, 0, 999, b"s95")
    assert mixed is not None and mixed.fetch == [95 + 100 * n for n in range(9)]
    assert [e.offset for e in mixed.cached] == [995]


def test_a_range_the_index_does_not_cover_is_scanned() -> None:
    recent = RecentEvents(max_bytes=0)
    _interleaved(recent, 10, 5, start=100)
    assert recent.locate(0, 0, 149, b"s3") == Located(scan_end=99, fetch=[103, 113, 123, 133, 143])
    assert recent.locate(0, 100, 150, b"s3") is None  # past what the track agent consumed
    assert recent.locate(0, 0, 50, b"s3") is None  # wholly before the index
    assert recent.locate(1, 0, 10, b"s3") is None  # another partition
    assert recent.locate(0, 100, 149, b"nobody") == Located(scan_end=None)


def test_the_index_keeps_its_newest_half_within_its_budget_and_starts_over_on_redelivery() -> None:
    recent = RecentEvents(max_bytes=0, max_offsets=100)
    _interleaved(recent, 10, 20)  # 200 records: trimmed twice
    assert recent._indexed <= 100
    found = recent.locate(0, 0, 199, b"s4")
    assert found is not None and found.scan_end is not None
    assert found.fetch == [o for o in range(4, 200, 10) if o > found.scan_end]
    assert len(found.fetch) >= 5
    recent.add(0, 150, b"s4", b"again")  # re-delivered: what was known about the partition is dropped
    assert recent.locate(0, 0, 149, b"s4") is None
    assert recent._indexed == 1


def test_a_read_returns_exactly_the_keys_records_in_the_range() -> None:
    rng = random.Random(7)
    recent = RecentEvents()
    held: list[tuple[int, bytes, bytes]] = []
    for offset in range(10, 400):
        key = rng.choice([b"a", b"b", b"c"])
        held.append((offset, key, f"v{offset}".encode()))
        recent.add(0, offset, key, held[-1][2])
    for _ in range(300):
        start = rng.randrange(10, 400)
        end = rng.randrange(start - 3, 400)
        key = rng.choice([b"a", b"b", b"c", b"nobody"])
        expected = [RawEvent(o, v) for o, k, v in held if k == key and start <= o <= end]
        assert recent.read(0, start, end, key) == expected
