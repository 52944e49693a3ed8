"""The projector's memory of each session's latest timestamp, which tells a late event (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from projections.late_events import LatestStamps, Placement, first_seq, place_late

T = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
P = ("events", 0)
S = ("app", "u", "s")


def at(ms: float) -> datetime:
    return T + timedelta(milliseconds=ms)


def test_an_event_stamped_before_one_logged_earlier_is_late() -> None:
    stamps = LatestStamps()
    stamps.follow(P, 10)
    stamps.learn(P, S, None)  # a new session: Cassandra holds none of its events
    assert [stamps.place(P, S, at(ms)) for ms in (5, 9, 7, 9, 12, 11.5)] == [False, False, True, False, False, True]
    # Cassandra keeps milliseconds: a stamp in the same millisecond as the latest is not late (the scan
    # from the boundary's millisecond reaches it).
    assert not stamps.place(P, S, at(12.3))


def test_what_cassandra_holds_is_the_start() -> None:
    stamps = LatestStamps()
    stamps.follow(P, 0)
    assert not stamps.knows(P, S)
    stamps.learn(P, S, at(100).replace(tzinfo=None))  # the driver's naive UTC
    assert stamps.knows(P, S) and stamps.place(P, S, at(50)) and not stamps.place(P, S, at(100))


def test_a_jump_in_the_partitions_offsets_forgets_it() -> None:
    """Another projector may have written the partition's sessions meanwhile: they are read again."""
    stamps = LatestStamps()
    for offset in (0, 1, 2):
        stamps.follow(P, offset)
    stamps.learn(P, S, at(1))
    stamps.follow(P, 3)
    assert stamps.knows(P, S)
    stamps.follow(P, 40)  # handed back after another projector advanced it
    assert not stamps.knows(P, S)
    stamps.learn(P, S, at(1))
    stamps.follow(P, 41)
    stamps.follow(("events", 1), 7)  # another partition's records do not break this one's run
    stamps.follow(P, 42)
    assert stamps.knows(P, S)
    stamps.follow(P, 30)  # a seek back (a batch delivered again)
    assert not stamps.knows(P, S)


def test_a_deleted_session_starts_afresh() -> None:
    stamps = LatestStamps()
    stamps.follow(P, 0)
    stamps.learn(P, S, at(100))
    stamps.forget(P, S)
    assert stamps.knows(P, S) and not stamps.place(P, S, at(1))


def test_the_memory_is_bounded_least_recent_out() -> None:
    stamps = LatestStamps(capacity=2)
    stamps.follow(P, 0)
    for n in range(3):
        stamps.learn(P, ("app", "u", f"s{n}"), at(n))
    stamps.place(P, ("app", "u", "s1"), at(5))
    stamps.learn(P, ("app", "u", "s3"), at(3))
    assert [stamps.knows(P, ("app", "u", f"s{n}")) for n in range(4)] == [False, True, False, True]
    with pytest.raises(ValueError):
        LatestStamps(0)


def test_an_event_published_again_keeps_its_first_place() -> None:
    assert first_seq(at(5), 30, (at(5), 12)) == 12  # the same event, sent again: where the log first had it
    assert first_seq(at(5.4), 30, (at(5).replace(tzinfo=None), 12)) == 12  # to Cassandra's millisecond
    assert first_seq(at(5), 30, (at(5), 30)) is None  # this very record, delivered again
    assert first_seq(at(5), 30, (at(6), 12)) is None  # another stamp: not the same record sent again
    assert first_seq(at(5), 30, None) is None


def test_a_late_record_is_late_at_its_offset_unless_its_event_was_logged_before() -> None:
    records = [("e1", at(5), 10), ("e2", at(9), 11), ("e3", at(6), 12), ("e1", at(5), 13), ("e0", at(1), 14)]
    # e3 is new and late; e1 was logged at offset 10 of this batch; e0 was stored at offset 3 by an earlier batch.
    placed = place_late(records, [2, 3, 4], {4: (at(1).replace(tzinfo=None), 3)})
    assert placed == {2: Placement(12, late=True), 3: Placement(10), 4: Placement(3)}
    assert place_late(records, [], {}) == {}


def test_a_stamp_in_the_latests_millisecond_is_a_tie_neither_late_nor_new() -> None:
    stamps = LatestStamps()
    stamps.follow(P, 0)
    stamps.learn(P, S, at(10))
    assert [stamps.order(P, S, at(ms)) for ms in (10, 10.7, 9, 11, 11)] == [0, 0, -1, 1, 0]


def test_a_record_in_the_latests_millisecond_published_again_keeps_its_first_place() -> None:
    """e1 and e2 share a millisecond; e1 sent again right after them is not late, yet it is e1 published again:
    where the log first had it, or a summary up to e1 would hide e2, which it never held."""
    records = [("e1", at(5), 10), ("e2", at(5), 11), ("e1", at(5.2), 12), ("e3", at(5), 13), ("e0", at(5), 14)]
    placed = place_late(records, [], {4: (at(5), 2)}, ties=[1, 2, 3, 4])
    assert placed == {2: Placement(10), 4: Placement(2)}  # e2 and e3 are new: written plainly at their offsets
    assert place_late(records, [], {}, ties=[2]) == {2: Placement(10)}


def test_a_tie_is_looked_up_only_when_its_id_was_stamped_there_or_the_millisecond_is_not_all_known() -> None:
    # A producer whose clock ticks in seconds: every event of a burst in the same millisecond.
    stamps = LatestStamps(tied_ids=3)
    stamps.follow(P, 0)
    stamps.learn(P, S, None)  # a new session: every id of its millisecond is seen here
    assert [stamps.order(P, S, at(1000), e) for e in ("e1", "e2", "e3")] == [1, 1, 1]  # new: no read
    assert stamps.order(P, S, at(1000.4), "e2") == 0  # e2 published again: looked up
    assert stamps.order(P, S, at(1000), "e4") == 1  # the fourth id: new, but no longer all remembered
    assert stamps.order(P, S, at(1000), "e5") == 0  # past the bound: looked up again
    assert stamps.order(P, S, at(2000), "e6") == 1 and stamps.order(P, S, at(2000), "e7") == 1  # a new millisecond
    assert stamps.order(P, S, at(1000), "e1") == -1  # late


def test_a_session_read_cold_from_cassandra_has_its_ties_looked_up() -> None:
    stamps = LatestStamps()
    stamps.follow(P, 0)
    stamps.learn(P, S, at(1000))  # which events Cassandra holds in that millisecond is not known
    assert [stamps.order(P, S, at(1000), e) for e in ("e1", "e2")] == [0, 0]
    assert stamps.order(P, S, at(1001), "e3") == 1 and stamps.order(P, S, at(1001), "e4") == 1
    assert stamps.order(P, S, at(1001), "e3") == 0
    stamps.follow(P, 40)  # a jump: read cold again
    stamps.learn(P, S, at(1001))
    assert stamps.order(P, S, at(1001), "e4") == 0
    stamps.forget(P, S)  # deleted: no event, every id of its next millisecond is seen here
    assert stamps.order(P, S, at(5), "e1") == 1 and stamps.order(P, S, at(5), "e2") == 1
    with pytest.raises(ValueError):
        LatestStamps(tied_ids=-1)


def test_a_tie_without_its_id_is_looked_up_and_leaves_the_millisecond_not_all_known() -> None:
    stamps = LatestStamps()
    stamps.follow(P, 0)
    stamps.learn(P, S, None)
    assert stamps.order(P, S, at(7), "e1") == 1
    assert stamps.order(P, S, at(7)) == 0
    assert stamps.order(P, S, at(7), "e2") == 0


def test_a_batch_of_more_sessions_than_the_memory_holds_files_the_dropped_ones_as_late() -> None:
    """The projector learns a batch's unknown sessions first, then places its records: with more sessions
    than ``capacity`` the first learnt were dropped again, and placing their records raised ``KeyError``
    (the batch failed at every retry: the partition stalled). Not known, a record is filed as late."""
    stamps = LatestStamps(capacity=2)
    sessions = [("app", "u", f"s{n}") for n in range(3)]
    for offset, session in enumerate(sessions):
        stamps.follow(P, offset)
        stamps.learn(P, session, at(100))
    assert not stamps.knows(P, sessions[0])
    assert stamps.order(P, sessions[0], at(200), "e1") == -1
    assert stamps.order(P, sessions[2], at(50), "e2") == -1 and stamps.order(P, sessions[2], at(200), "e3") == 1
