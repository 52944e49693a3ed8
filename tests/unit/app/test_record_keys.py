"""Any Kafka key layout works, as long as a session keeps one key on one partition.

The track handler (dict table, no broker): a session keyed ``app:user:session``,
by its bare id or by opaque bytes gets jobs that read its delta by that key; the
sweep pokes it with that key. A null key, a second key for a session or a
second partition is dead-lettered with a reason naming the keys.
"""

from __future__ import annotations

import base64
import json
from datetime import timedelta

import pytest

from schemas import Summarize, SummarizeSync
from streams.app.coordinates import Coordinates
from streams.app.sweep import sweep_commands
from streams.app.track import TrackHandler
from streams.app.tracked import TrackedKey, table_key
from streams.rules.record_keys import RECORD_KEY_ERROR, describe_key
from tests.unit.app.test_track_handler import T0, event, handler

FULL = table_key("a", "u", "s", "")


def fold(h: TrackHandler, table: dict[str, TrackedKey], key: bytes | None, numbers: range, partition: int = 1) -> list:
    return [h.on_record(event(n, "user" if n == 1 else "assistant"), Coordinates("ev", partition, n), table, key=key)
            for n in numbers]  # fmt: skip


@pytest.mark.parametrize("key", [b"a:u:s", b"s", b"\x00\xfe\xffopaque", b"u"], ids=["colons", "bare", "bytes", "user"])
def test_any_non_null_key_is_kept_and_its_jobs_read_by_it(key: bytes) -> None:
    table: dict[str, TrackedKey] = {}
    outs = fold(handler(threshold=2), table, key, range(1, 4))
    assert all(o.dead_letter is None for o in outs)
    jobs = [j for o in outs for j in o.jobs]
    assert len(jobs) == 1 and jobs[0].events_key() == key
    assert table[FULL].record_key == key
    # the key survives the changelog
    assert TrackedKey.from_bytes(table[FULL].to_bytes()).record_key == key


def test_the_canonical_key_adds_nothing_to_the_job_or_the_changelog_row() -> None:
    table: dict[str, TrackedKey] = {}
    outs = fold(handler(threshold=2), table, b"a/u/s", range(1, 4))
    job = next(j for o in outs for j in o.jobs)
    assert job.events_key_b64 is None and job.events_key() == b"a/u/s"
    assert table[FULL].record_key is None and len(json.loads(table[FULL].to_bytes())) == 5


def test_a_null_key_is_dead_lettered_naming_it_and_touches_no_state() -> None:
    table: dict[str, TrackedKey] = {}
    out = handler().on_record(event(1, "user"), Coordinates("ev", 0, 4), table, key=None, raw=b"the bytes")
    assert out.dead_letter is not None and not out.jobs and not table
    dl = out.dead_letter
    assert dl.error_class == RECORD_KEY_ERROR and "no Kafka key (null)" in dl.reason and "a/u/s" in dl.reason
    assert dl.key_b64 is None and base64.b64decode(dl.value_b64) == b"the bytes"
    assert (dl.source_partition, dl.source_offset) == (0, 4)


def test_a_second_key_for_a_session_is_dead_lettered_naming_both_and_the_session_goes_on() -> None:
    table: dict[str, TrackedKey] = {}
    h = handler(threshold=100)
    fold(h, table, b"a:u:s", range(1, 3))
    before = table[FULL]
    out = h.on_record(event(3), Coordinates("ev", 1, 3), table, key=b"other\xff")
    assert out.dead_letter is not None and out.dead_letter.error_class == RECORD_KEY_ERROR
    assert "'a:u:s'" in out.dead_letter.reason and describe_key(b"other\xff") in out.dead_letter.reason
    assert base64.b64decode(out.dead_letter.key_b64 or "") == b"other\xff"
    assert table[FULL] is before  # the refused event is not folded in
    assert fold(h, table, b"a:u:s", range(4, 5))[0].dead_letter is None
    assert [p.event_id for p in table[FULL].state.pending] == ["e1", "e2", "e4"]


def test_the_canonical_key_after_a_custom_one_is_a_second_key_too() -> None:
    table: dict[str, TrackedKey] = {}
    h = handler(threshold=100)
    fold(h, table, b"s", range(1, 2))
    out = h.on_record(event(2), Coordinates("ev", 1, 2), table)  # default: the canonical key
    assert out.dead_letter is not None and "'a/u/s'" in out.dead_letter.reason and "'s'" in out.dead_letter.reason


def test_a_session_on_a_second_partition_is_dead_lettered() -> None:
    """Offsets of two partitions in one state: the read would reach past a partition's end."""
    table: dict[str, TrackedKey] = {}
    h = handler(threshold=2)
    fold(h, table, b"a:u:s", range(1, 2), partition=1)
    out = h.on_record(event(2), Coordinates("ev", 0, 50), table, key=b"a:u:s")
    assert out.dead_letter is not None and not out.jobs
    assert "partition 0" in out.dead_letter.reason and "partition 1" in out.dead_letter.reason
    assert table[FULL].state.high_offset == 1


def test_commands_follow_the_same_rule() -> None:
    table: dict[str, TrackedKey] = {}
    h = handler(threshold=100)
    fold(h, table, b"a:u:s", range(1, 3))
    force = Summarize(app_name="a", user_id="u", session_id="s", command_id="c1", force=True)
    wrong = h.on_record(force, Coordinates("ev", 1, 3), table, key=b"a/u/s", log_time=T0)
    assert wrong.dead_letter is not None and not wrong.jobs
    right = h.on_record(force, Coordinates("ev", 1, 3), table, key=b"a:u:s", log_time=T0)
    assert right.dead_letter is None and [j.events_key() for j in right.jobs] == [b"a:u:s"]


def test_a_refused_sync_request_is_answered_naming_the_keys() -> None:
    """The caller waits for an answer: it gets a failure saying why, not a timeout."""
    table: dict[str, TrackedKey] = {}
    h = handler(threshold=100)
    fold(h, table, b"a:u:s", range(1, 3))
    sync = SummarizeSync(app_name="a", user_id="u", session_id="s", command_id="c", reply_to="corr")
    out = h.on_record(sync, Coordinates("ev", 1, 3), table, key=b"a/u/s", log_time=T0)
    assert out.dead_letter is not None and not out.jobs
    (reply,) = out.replies
    assert (reply.reply_to, reply.error_class) == ("corr", RECORD_KEY_ERROR)
    assert "'a/u/s'" in reply.reason and "'a:u:s'" in reply.reason


def test_the_sweep_pokes_a_session_with_its_own_key() -> None:
    table: dict[str, TrackedKey] = {}
    h = handler(threshold=2, wall_clock=lambda: T0.timestamp())
    fold(h, table, b"\x00bin", range(1, 4))
    pokes = sweep_commands(table.values(), now=T0 + timedelta(seconds=500), idle_after_s=None, job_timeout_s=120)
    assert [(p, k) for p, k, _ in pokes] == [(1, b"\x00bin")]
    out = h.on_record(pokes[0][2], Coordinates("ev", 1, 9), table, key=pokes[0][1], log_time=T0)
    assert out.dead_letter is None and [(j.origin, j.events_key()) for j in out.jobs] == [("retry", b"\x00bin")]


def test_a_deleted_session_keeps_its_key() -> None:
    from schemas import DeleteSession

    table: dict[str, TrackedKey] = {}
    h = handler(threshold=100)
    fold(h, table, b"s", range(1, 3))
    delete = DeleteSession(app_name="a", user_id="u", session_id="s", command_id="d")
    assert h.on_record(delete, Coordinates("ev", 1, 3), table, key=b"s").dead_letter is None
    assert table[FULL].record_key == b"s" and not table[FULL].state.pending


@pytest.mark.parametrize(
    ("key", "named"),
    [
        (None, "null"),
        (b"a:u:s", "'a:u:s'"),
        (b"\xff\x00", "base64:/wA="),
        (b"tab\there", "base64:dGFiCWhlcmU="),
        ("会话".encode(), "'会话'"),
    ],
)
def test_keys_are_named_readably(key: bytes | None, named: str) -> None:
    assert describe_key(key) == named


def test_a_first_command_that_decides_nothing_still_fixes_the_key() -> None:
    """A ``summarize_sync`` on a key the allowlist refuses decides nothing for the session; it fixed no key,
    where the projector (which knows no policy) takes every summarize command to fix it: the event after
    it with another key was summarized by the worker and refused by the projector."""
    from streams.rules.checks import EventThreshold
    from streams.rules.policy import PolicySet, SummaryPolicy

    h = TrackHandler(PolicySet(SummaryPolicy(checks=(EventThreshold(100),), allowlist=("allowed",))))
    table: dict[str, TrackedKey] = {}
    sync = SummarizeSync(app_name="a", user_id="u", session_id="s", command_id="c", filter_key="refused", reply_to="r")
    assert h.on_record(sync, Coordinates("ev", 1, 1), table, key="会话/键".encode(), log_time=T0).dead_letter is None
    out = fold(h, table, b"a/u/s", range(2, 3))[0]
    assert out.dead_letter is not None and out.dead_letter.error_class == RECORD_KEY_ERROR
    assert "'会话/键'" in out.dead_letter.reason
    assert fold(h, table, "会话/键".encode(), range(3, 4))[0].dead_letter is None
