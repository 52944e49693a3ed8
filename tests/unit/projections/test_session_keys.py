"""The projector's judge of record keys (``projections.session_keys``) applies the worker's rule
(``schemas.record_keys``) in log order: the first event or summarize command fixes a session's key and
partition, a delete does not, and what is fixed (read from Cassandra, remembered, or fixed earlier in the
batch) refuses a record with another key or on another partition with the worker's reason."""

from __future__ import annotations

import pytest

from projections.session_keys import KnownKeys, SessionKeys
from schemas import DeleteSession, SessionEvent, SessionKey, Summarize, SummarizeSync
from schemas.record_keys import fixes_session_key, key_problem, only_fixes_key

S = SessionKey("应用", "用户", "会话")
KEY = "应用/用户/会话".encode()


def test_the_first_fixing_record_fixes_key_and_partition_in_log_order() -> None:
    keys = SessionKeys(KnownKeys(), {S: None})
    assert keys.judge(b"x", 3, 9, S, fixes=False) is None  # a delete: accepted, fixes nothing
    assert keys.judge(KEY, 2, 10, S, fixes=True) is None
    assert keys.fixed == [(S, (KEY, 2), 10)]
    second = keys.judge(b"x", 2, 11, S, fixes=True)
    assert second is not None and "'x'" in second and "'应用/用户/会话'" in second
    moved = keys.judge(KEY, 3, 12, S, fixes=False)
    assert moved is not None and "partition 3" in moved and "partition 2" in moved
    assert keys.fixed == [(S, (KEY, 2), 10)]


def test_what_cassandra_holds_or_the_process_remembers_decides_and_a_batch_is_remembered_once_durable() -> None:
    known = KnownKeys()
    read = SessionKeys(known, {S: (b"stored", 0)})
    assert read.judge(KEY, 0, 1, S, fixes=True) is not None and not read.fixed
    assert known.missing([S]) == [S]  # not remembered before the batch is done
    read.remember()
    assert known.missing([S]) == []
    later = SessionKeys(known, {})
    assert later.judge(b"stored", 0, 2, S, fixes=True) is None and not later.fixed


def test_a_null_key_is_refused_and_fixes_nothing() -> None:
    keys = SessionKeys(KnownKeys(), {S: None})
    problem = keys.judge(None, 0, 1, S, fixes=True)
    assert problem == key_problem(None, S, KEY, known=False, known_key=None, known_partition=None, partition=0)
    assert problem is not None and "no Kafka key (null)" in problem and not keys.fixed


def test_the_memory_is_bounded_least_recently_used_out() -> None:
    known = KnownKeys(2)
    a, b, c = SessionKey("a", "u", "1"), SessionKey("a", "u", "2"), SessionKey("a", "u", "3")
    known.put(a, (b"a", 0))
    known.put(b, (b"b", 0))
    assert known.get(a) == (b"a", 0)
    known.put(c, (b"c", 0))
    assert known.missing([a, b, c]) == [b]


@pytest.mark.parametrize(
    ("record", "fixes", "only"),
    [
        (SessionEvent(app_name="a", user_id="u", session_id="s", event_id="e", timestamp="2025-01-01T00:00:00Z",
                      author="user", message={"role": "user", "content": "你好"}), True, False),
        (Summarize(app_name="a", user_id="u", session_id="s", command_id="c"), True, True),
        (SummarizeSync(app_name="a", user_id="u", session_id="s", command_id="c", reply_to="r"), True, True),
        (DeleteSession(app_name="a", user_id="u", session_id="s", command_id="c"), False, False),
        (None, False, False),
    ],
)  # fmt: skip
def test_which_records_fix_a_sessions_key_and_which_only_that(record: object, fixes: bool, only: bool) -> None:
    """A summarize command fixes the key as an event does, but the stages store nothing of it and never
    dead-letter it (``only_fixes_key``): the worker refuses it."""
    assert fixes_session_key(record) is fixes
    assert only_fixes_key(record) is only


def test_a_fix_taken_with_its_records_rows_is_not_written_again_and_all_are_remembered() -> None:
    other = SessionKey("应用", "用户", "另一个")
    known = KnownKeys()
    keys = SessionKeys(known, {S: None, other: None})
    assert keys.judge(KEY, 0, 5, S, fixes=True) is None and keys.judge(b"o", 0, 6, other, fixes=True) is None
    assert keys.take(0, 5) == (S, (KEY, 0), 5) and keys.take(0, 5) is None and keys.take(0, 7) is None
    assert keys.untaken() == [(other, (b"o", 0), 6)]
    keys.remember()
    assert known.missing([S, other]) == []
