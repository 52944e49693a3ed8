"""The recent-records window the event-log reader answers from before scanning Kafka."""

from __future__ import annotations

from streams.app.event_log import RawEvent, RecentEvents


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
