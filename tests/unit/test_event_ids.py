"""An event id names one event (``schemas.event_ids``): the rule, the memory, and the worker's side of it.

The projector's side runs through Cassandra (``tests/integration/test_pipeline_event_ids.py`` checks both
sides end to end); here the digest, the memory both sides judge with, the track stage's refusal, its memory
learnt from the log after a restart, and the summarize stage leaving a refused record out of a delta.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from schemas import DeleteSession, SessionEvent, SessionKey
from schemas.event_ids import (
    EVENT_ID_REUSED,
    FirstDigests,
    content_digest,
    first_digests,
    record_digest,
    reuse_problem,
)
from streams.app.coordinates import Coordinates
from streams.app.event_ids import Unknown, digests_in, learn
from streams.app.event_log import RawEvent
from streams.app.summarize import SummarizeHandler
from streams.app.tracked import TrackedKey, table_key
from tests.unit.app.test_track_handler import handler

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SK = SessionKey("a", "u", "s")


def event(event_id: str, text: str, at: int = 0, **fields: Any) -> SessionEvent:
    return SessionEvent.model_validate({
        "app_name": SK.app_name, "user_id": SK.user_id, "session_id": SK.session_id, "event_id": event_id,
        "timestamp": (T0 + timedelta(seconds=at)).isoformat(), "author": "bot",
        "message": {"role": "assistant", "content": text}, **fields,
    })  # fmt: skip


# -- the digest ---------------------------------------------------------------------------------------------


def test_the_same_event_published_again_has_the_same_digest_whatever_its_key_order_spacing_or_version() -> None:
    e = event("e1", "hello 你好", 1, usage={"prompt_tokens": 3}, native={"k": [1, 2], "big": 2**70})
    raw = e.model_dump_json().encode()
    data = json.loads(raw)
    reordered = json.dumps(dict(reversed(list(data.items()))), indent=2, ensure_ascii=True).encode()
    newer_client = json.dumps({**data, "schema_version": 99}).encode()
    assert record_digest(reordered) == record_digest(raw) == record_digest(newer_client) == content_digest(e)


def test_a_value_written_otherwise_is_other_content() -> None:
    """The digest is of the JSON document (every stage takes it from the bytes alike), not of the validated
    event: a producer re-publishing an event sends what it sent."""
    raw = event("e1", "hello", 1).model_dump_json().encode()
    data = json.loads(raw)
    assert record_digest(json.dumps({**data, "timestamp": "2026-01-01T01:00:01+01:00"}).encode()) != record_digest(raw)


@pytest.mark.parametrize(
    "change",
    [
        {"message": {"role": "assistant", "content": "hello 你好!"}},
        {"timestamp": (T0 + timedelta(seconds=1, milliseconds=1)).isoformat()},  # a re-publish keeps its stamp
        {"author": "other"},
        {"filter_key": "a/branch"},
        {"skip_summarization": True},
        {"native": {"k": [1, 3]}},  # a producer's own field: not the same event either
    ],
)
def test_any_other_content_changes_the_digest(change: dict[str, Any]) -> None:
    e = event("e1", "hello 你好", 1, native={"k": [1, 2]})
    other = SessionEvent.model_validate({**json.loads(e.model_dump_json()), **change})
    assert content_digest(other) != content_digest(e)


def test_the_reason_names_the_id_the_session_and_both_digests() -> None:
    assert reuse_problem(SK, "e1", None, "d2") is None
    assert reuse_problem(SK, "e1", "d2", "d2") is None
    reason = reuse_problem(SK, "e1", "d1", "d2")
    assert reason is not None and "'e1'" in reason and "a/u/s" in reason and "d1" in reason and "d2" in reason


def test_the_first_record_of_an_id_wins() -> None:
    assert first_digests([("e1", "a"), ("e2", "b"), ("e1", "c")]) == {"e1": "a", "e2": "b"}


# -- the memory ---------------------------------------------------------------------------------------------


def test_the_memory_refuses_another_digest_keeps_duplicates_silent_and_starts_afresh_after_a_deletion() -> None:
    m = FirstDigests()
    m.follow(0, 5)
    m.learn(0, SK, {"e1": "d1"})
    assert m.judge(0, SK, "e1", "d1") is None  # a duplicate
    assert m.judge(0, SK, "e1", "d9") is not None
    assert m.judge(0, SK, "e2", "d2") is None and m.first(0, SK) == {"e1": "d1", "e2": "d2"}
    assert m.judge(0, SK, "e2", "d3") is not None
    m.follow(0, 6)
    m.forget(0, SK)
    assert m.knows(0, SK) and m.judge(0, SK, "e1", "d9") is None


def test_a_jump_in_a_partitions_offsets_forgets_its_sessions_but_the_same_record_again_does_not() -> None:
    m = FirstDigests()
    m.follow(0, 5)
    m.learn(0, SK, {"e1": "d1"})
    m.follow(1, 0)
    m.learn(1, SK, {})
    m.follow(0, 5)  # the record just followed, again (the worker's batch follows its first record early)
    m.follow(0, 6)
    assert m.knows(0, SK) and m.next_offset(0) == 7
    m.follow(0, 3)  # sought back: what it learnt may hold records after this one
    assert not m.knows(0, SK) and m.first(0, SK) is None
    assert m.knows(1, SK)  # another partition's sessions stay
    with pytest.raises(KeyError):
        m.judge(0, SK, "e1", "d1")


def test_the_memory_is_bounded_by_ids_least_recently_used_sessions_out() -> None:
    m = FirstDigests(capacity=3)
    m.follow(0, 0)
    other = SessionKey("a", "u", "t")
    m.learn(0, other, {"x1": "d", "x2": "d"})
    m.learn(0, SK, {"e1": "d"})
    assert m.knows(0, other)
    m.judge(0, SK, "e2", "d")  # four ids: the session used longest ago goes
    assert not m.knows(0, other) and m.knows(0, SK)
    m.judge(0, SK, "e3", "d")  # the one in use stays whatever its size
    assert m.knows(0, SK) and len(m.first(0, SK) or {}) == 3


# -- the track stage ----------------------------------------------------------------------------------------


def coords(offset: int) -> Coordinates:
    return Coordinates("ev", 0, offset)


def pending(table: dict[str, TrackedKey]) -> list[str]:
    return [p.event_id for p in table[table_key(*SK, "")].state.pending]


def test_the_track_stage_dead_letters_a_reused_id_and_counts_it_nowhere() -> None:
    h = handler(threshold=100, digests=FirstDigests())
    table: dict[str, TrackedKey] = {}
    e1, e2 = event("e1", "first", 1), event("e2", "second", 2)
    for n, e in enumerate([e1, e2]):
        assert h.on_record(e, coords(n), table).dead_letter is None
    assert h.on_record(e2, coords(2), table).dead_letter is None  # a producer's retry: silent
    out = h.on_record(event("e1", "other content", 1), coords(3), table)
    letter = out.dead_letter
    assert letter is not None and letter.error_class == EVENT_ID_REUSED and letter.stage == "track"
    assert letter.source_offset == 3 and content_digest(e1) in letter.reason
    assert "other content" in json.loads(__import__("base64").b64decode(letter.value_b64))["message"]["content"]
    late = event("e2", "second", 60)  # the same text stamped again is another record too
    assert h.on_record(late, coords(4), table).dead_letter is not None
    assert pending(table).count("e1") == 1 and "e1" in pending(table)


def test_after_a_deletion_an_id_may_name_new_content() -> None:
    h = handler(threshold=100, digests=FirstDigests())
    table: dict[str, TrackedKey] = {}
    h.on_record(event("e1", "before", 1), coords(0), table)
    h.on_record(DeleteSession(app_name="a", user_id="u", session_id="s", command_id="d"), coords(1), table)
    assert h.on_record(event("e1", "re-imported, other text", 1), coords(2), table).dead_letter is None
    assert h.on_record(event("e1", "before", 1), coords(3), table).dead_letter is not None


def test_a_worker_that_did_not_judge_a_sessions_records_learns_them_from_the_log() -> None:
    """A restart (or a rebalance): the track state came back from its changelog, the memory did not."""
    table: dict[str, TrackedKey] = {}
    first = handler(threshold=100, digests=FirstDigests())
    log = [event("e1", "first", 1), event("x1", "another session's", 1, session_id="t"), event("e2", "second", 2)]
    for n, e in enumerate(log):
        first.on_record(e, coords(10 + n), table)
    restarted = handler(threshold=100, digests=FirstDigests())
    digests = restarted.digests
    assert digests is not None
    digests.follow(0, 13)
    full = table[table_key(*SK, "")]
    assert restarted.unknown_before(0, 13, SK, full) == 10  # read from the session's first offset

    class Log:
        async def read_keys(self, partition: int, ranges: Sequence[tuple[int, int, bytes]]) -> list[list[RawEvent]]:
            assert partition == 0 and [(start, end) for start, end, _ in ranges] == [(10, 12)]
            return [[RawEvent(10 + n, e.model_dump_json().encode()) for n, e in enumerate(log)]]

    asyncio.run(learn(digests, Log(), [Unknown(0, SK, 10, 12, SK.kafka_key())], None))
    out = restarted.on_record(event("e1", "other content", 1), coords(13), table)
    assert out.dead_letter is not None and out.dead_letter.error_class == EVENT_ID_REUSED
    assert restarted.on_record(event("x9", "new", 3), coords(14), table).dead_letter is None
    # A session whose records all come after the state's first offset costs no read.
    assert restarted.unknown_before(0, 15, SessionKey("a", "u", "new"), None) is None


def test_sessions_learnt_together_are_read_once_per_partition() -> None:
    """After a restart every active session is unknown: their stretches of one partition are read by one
    call (one scan of the log), not one per session."""
    sessions = [SessionKey("a", "u", f"s{n}") for n in range(4)]
    records = {sk: [RawEvent(n, event(f"{sk.session_id}-e", "x", 1, session_id=sk.session_id)
                             .model_dump_json().encode())] for n, sk in enumerate(sessions)}  # fmt: skip
    calls: list[tuple[int, int]] = []

    class Log:
        async def read_keys(self, partition: int, ranges: Sequence[tuple[int, int, bytes]]) -> list[list[RawEvent]]:
            calls.append((partition, len(ranges)))
            return [records[sessions[start]] for start, _, _ in ranges]

    digests = FirstDigests()
    unknown = [Unknown(n % 2, sk, n, n, sk.kafka_key()) for n, sk in enumerate(sessions)]
    asyncio.run(learn(digests, Log(), unknown, None))
    assert sorted(calls) == [(0, 2), (1, 2)]
    for n, sk in enumerate(sessions):
        assert digests.knows(n % 2, sk)


def test_learning_takes_the_first_record_of_each_id_of_the_session_only() -> None:
    raw = [
        RawEvent(0, event("e1", "first", 1).model_dump_json().encode()),
        RawEvent(1, b"not json"),
        RawEvent(2, event("e1", "refused", 1).model_dump_json().encode()),
        RawEvent(3, event("e2", "other session", 1, session_id="t").model_dump_json().encode()),
    ]
    assert digests_in(raw, SK, None) == {"e1": content_digest(event("e1", "first", 1))}


# -- the summarize stage ------------------------------------------------------------------------------------


class WindowLog:
    def __init__(self, events: list[SessionEvent]) -> None:
        self.records = [RawEvent(n, e.model_dump_json().encode()) for n, e in enumerate(events)]
        self.reads: list[tuple[int, int]] = []

    async def read(self, partition: int, start: int, end: int, key: bytes) -> list[RawEvent]:
        self.reads.append((start, end))
        return [r for r in self.records if start <= r.offset <= end]


def summarize_handler(log: WindowLog, digests: FirstDigests) -> SummarizeHandler:
    return SummarizeHandler(object(), log, lambda app: object(), digests=digests)  # type: ignore[arg-type]


def job_from(start: int) -> Any:
    from schemas import SummaryJob

    return SummaryJob.model_validate({
        "job_id": "j", "app_name": "a", "user_id": "u", "session_id": "s", "from_version": 1,
        "upto": {"last_event_id": "e9", "cutoff_at": T0.isoformat(), "offset": 9},
        "trigger": {"name": "event_threshold"}, "created_at": T0.isoformat(), "events_from_offset": start,
    })  # fmt: skip


@pytest.mark.parametrize("known", [True, False], ids=["track-memory", "read-from-the-log"])
def test_a_delta_leaves_out_a_record_reusing_an_id_first_logged_before_it(known: bool) -> None:
    log_events = [event("e1", "first", 1), event("e2", "second", 2)]
    window = [event("e1", "other content", 1), event("e2", "second", 2), event("e3", "third", 3)]
    log = WindowLog([*log_events, *window])
    digests = FirstDigests()
    if known:
        digests.follow(0, 0)
        digests.learn(0, SK, {})
        for n, e in enumerate([*log_events, *window]):
            digests.follow(0, n)
            digests.judge(0, SK, e.event_id, content_digest(e))
    h = summarize_handler(log, digests)
    raws = [r.value for r in log.records[2:]]
    kept, kept_raws = asyncio.run(h._without_reused(job_from(0), 0, 2, window, raws))
    # e1 is refused (another digest); e2 published again is left to the delta's rule for it, as before.
    assert [e.event_id for e in kept] == ["e2", "e3"] and kept_raws == raws[1:]
    assert log.reads == ([] if known else [(0, 1)])
