"""A record Cassandra refuses as invalid is dead-lettered with the reason; the batch goes on.

Cassandra refuses a key component over 65535 bytes (``InvalidRequest``: "Key
length of … is longer than maximum of 65535"). Such a summary or delete was
retried forever, stalling its partition.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest

from projections.indexer import RecallIndexer
from projections.projector import Projector
from projections.stage import SourceRecord
from schemas import DeadLetter, SessionKey
from tests.integration.test_projections_support import EVENTS, SUMMARIES, Store, event, key, record, store, summary

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="session")]
__all__ = ["key", "store"]

HUGE = "k" * 70_000
"""A filter key / session id past Cassandra's 64 KiB key limit (the schema allows it)."""


async def test_a_refused_summary_is_dead_lettered_and_the_rest_of_the_batch_is_written(
    store: Store, key: SessionKey
) -> None:
    refused = record(SUMMARIES, summary(key, 1, text="lost", cutoff=1, last_event_id="e1", filter_key=HUGE), offset=7)
    outcome = await store.apply(
        record(EVENTS, event(key, "e1", at=1, content="before"), offset=20),
        refused,
        record(SUMMARIES, summary(key, 1, text="全量摘要", cutoff=1, last_event_id="e1"), offset=8),
        record(SUMMARIES, summary(key, 1, text="branch", cutoff=1, last_event_id="e1", filter_key="app/b"), offset=9),
        record(EVENTS, event(key, "e2", at=2, content="after"), offset=21),
    )
    assert [(d.source_topic, d.source_offset, d.error_class) for d in store.dead] == [(SUMMARIES, 7, "StoreRefused")]
    assert "Key length" in store.dead[0].reason and store.dead[0].reason.startswith("cassandra refused the summary")
    assert outcome.summaries == 2 and outcome.events == 2
    assert await store.reader.get_summary_text(key) == "全量摘要"
    assert await store.reader.get_summary_text(key, "app/b") == "branch"
    assert await store.projector.load_offsets() == {(EVENTS, 0): 22, (SUMMARIES, 0): 10}


async def test_a_session_key_over_the_limit_is_dead_lettered_before_any_write(store: Store, key: SessionKey) -> None:
    # The driver cannot even route such a partition (it packs each key part's length in 16 bits).
    huge = SessionKey(key.app_name, key.user_id, HUGE)
    delete = {"type": "delete_session", "command_id": "d1", "app_name": key.app_name, "user_id": key.user_id,
              "session_id": HUGE}  # fmt: skip
    outcome = await store.apply(
        record(EVENTS, event(huge, "h1", at=1), offset=29),
        record(EVENTS, delete, offset=30, timestamp_ms=1),
        record(SUMMARIES, summary(huge, 1, text="s", cutoff=1, last_event_id="h1"), offset=11),
        record(EVENTS, event(key, "e1", at=1), offset=31),
    )
    assert [(d.source_offset, d.error_class) for d in store.dead] == [(29, "RecordDecodeError"),
                                                                      (30, "RecordDecodeError"),
                                                                      (11, "RecordDecodeError")]  # fmt: skip
    assert all("session_id is 70000 bytes" in d.reason for d in store.dead)
    assert outcome.deletes == 0 and outcome.events == 1
    assert [e.event_id for e in await store.reader.events_after_boundary(key)] == ["e1"]
    assert await store.projector.load_offsets() == {(EVENTS, 0): 32, (SUMMARIES, 0): 12}


async def test_a_late_event_whose_id_is_refused_is_dead_lettered_and_the_batch_goes_on(
    store: Store, key: SessionKey
) -> None:
    """A late event is looked up by its id (was it published before?): with an id over the key limit the
    lookup finds nothing, the event's own write is refused and dead-lettered, the rest is written."""
    outcome = await store.apply(
        record(EVENTS, event(key, "e1", at=5, content="先到的"), offset=40),
        record(EVENTS, event(key, HUGE, at=1, content="迟到的，id 过长"), offset=41),
        record(EVENTS, event(key, "e3", at=2, content="迟到的"), offset=42),
    )
    # (The recall indexer, which ran too, dead-letters it as well.)
    assert [(d.source_offset, d.error_class) for d in store.dead if d.stage == "project"] == [(41, "InvalidRequest")]
    assert outcome.events == 2
    assert await store.projector.load_offsets() == {(EVENTS, 0): 43}


def switch_to(k: SessionKey, epoch: int, heads: list[dict[str, Any]], cid: str) -> dict[str, Any]:
    return {
        "type": "epoch_adopted", "app_name": k.app_name, "user_id": k.user_id, "session_id": k.session_id,
        "epoch": epoch, "previous_epoch": 0, "heads": [{"summary": {**h, "epoch": epoch}} for h in heads],
        "replaced": [], "command_id": cid, "created_at": datetime.now(UTC).isoformat(),
    }  # fmt: skip


async def served(store: Store, k: SessionKey) -> dict[str, tuple[int, int, str]]:
    return {s.filter_key: (s.epoch, s.version, s.summary) for s in await store.reader.list_summaries(k)}


async def test_a_refused_head_of_an_epoch_switch_is_dead_lettered_and_the_switch_applies(store: Store) -> None:
    key = SessionKey("app", "u1", "s-switched")
    other = SessionKey("app", "u1", "s-other")
    await store.apply(
        record(SUMMARIES, summary(key, 1, text="旧摘要", cutoff=1, last_event_id="e1"), offset=50),
        record(SUMMARIES, summary(key, 1, text="旧分支", cutoff=1, last_event_id="e1", filter_key="app/b"), offset=51),
        record(SUMMARIES, summary(other, 1, text="other old", cutoff=1, last_event_id="o1"), offset=52),
    )
    heads = [summary(key, 1, text="新摘要", cutoff=2, last_event_id="e2"),
             summary(key, 1, text="refused", cutoff=2, last_event_id="e2", filter_key=HUGE),
             summary(key, 1, text="新分支", cutoff=2, last_event_id="e2", filter_key="app/b")]  # fmt: skip
    others = [summary(other, 1, text="other new", cutoff=2, last_event_id="o2")]
    outcome = await store.apply(
        record(SUMMARIES, switch_to(key, 1, heads, "c-refused"), offset=60),
        record(SUMMARIES, switch_to(other, 1, others, "c-other"), offset=61),
    )
    # The refused head alone is dead-lettered, naming its session and key; the session switched without it.
    [letter] = store.dead
    assert (letter.source_topic, letter.source_offset, letter.error_class) == (SUMMARIES, 60, "StoreRefused")
    assert "Key length" in letter.reason and "app/u1/s-switched" in letter.reason and "'kkkk" in letter.reason
    assert len(letter.reason) <= 2000
    assert outcome.adoptions == 2
    assert await served(store, key) == {"": (1, 1, "新摘要"), "app/b": (1, 1, "新分支")}
    assert await served(store, other) == {"": (1, 1, "other new")}
    # The session follows the adopted line: its next summary is served.
    nxt = {**summary(key, 2, text="新摘要二", cutoff=3, last_event_id="e3"), "epoch": 1}
    await store.apply(record(SUMMARIES, nxt, offset=62))
    assert (await served(store, key))[""] == (1, 2, "新摘要二")


async def test_a_switch_with_several_refused_heads_is_dead_lettered_once_naming_every_key(store: Store) -> None:
    # The record holds every head's text: kept once on the dead-letter topic, not once per refused head.
    key = SessionKey("app", "u1", "s-refused-twice")
    store.dead.clear()
    heads = [summary(key, 1, text="新摘要", cutoff=2, last_event_id="e2"),
             summary(key, 1, text="refused", cutoff=2, last_event_id="e2", filter_key=HUGE),
             summary(key, 1, text="refused too", cutoff=2, last_event_id="e2", filter_key="j" * 70_000)]  # fmt: skip
    outcome = await store.apply(record(SUMMARIES, switch_to(key, 1, heads, "c-twice"), offset=70))
    [letter] = store.dead
    assert (letter.source_offset, letter.error_class, outcome.adoptions) == (70, "StoreRefused", 1)
    assert "'kkkk" in letter.reason and "'jjjj" in letter.reason and "app/u1/s-refused-twice" in letter.reason
    assert len(letter.reason) <= 2000
    assert await served(store, key) == {"": (1, 1, "新摘要")}


NESTED = b'{"type": "event", "extra": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
"""200 KB of JSON nested deeper than Python's parser goes (``RecursionError``, not a ``ValueError``)."""
HUGE_INT = b'{"type": "event", "extra": 1' + b"0" * 5000 + b"}"
"""An integer past Python's digit limit (a ``ValueError`` that is no ``JSONDecodeError``)."""


@pytest.mark.parametrize(("raw", "reason"), [(NESTED, "nested too deep"), (HUGE_INT, "5001 digits")])
async def test_json_python_cannot_read_is_dead_lettered_and_the_batch_goes_on(
    store: Store, key: SessionKey, raw: bytes, reason: str
) -> None:
    """Another producer's record on the events or the summaries topic: the error out of the batch stopped
    ``distill projector`` (the projector and the indexer alike), and again at every restart."""
    outcome = await store.apply(
        record(EVENTS, event(key, "e1", at=1, content="之前的消息 MK-1"), offset=50),
        record(EVENTS, raw, offset=51),
        record(SUMMARIES, raw, offset=13),
        record(EVENTS, event(key, "e3", at=3, content="之后的消息 MK-3"), offset=52),
    )
    letters = [(d.stage, d.source_topic, d.source_offset, d.error_class) for d in store.dead]
    # One dead letter per bad record: the projector's (the indexer skips what the projector dead-letters).
    assert letters == [("project", EVENTS, 51, "RecordDecodeError"), ("project", SUMMARIES, 13, "RecordDecodeError")]
    assert all(reason in d.reason for d in store.dead), [d.reason for d in store.dead]
    assert outcome.events == 2
    assert [e.event_id for e in await store.reader.events_after_boundary(key)] == ["e1", "e3"]
    hits = await store.reader.session_search(key, "之后的消息", "current_session", top_k=10)
    assert "e3" in {h.event_id for h in hits}
    assert await store.projector.load_offsets() == {(EVENTS, 0): 53, (SUMMARIES, 0): 14}


async def test_a_record_without_a_key_is_dead_lettered_not_stored(store: Store, key: SessionKey) -> None:
    """The worker refuses a session's record without a Kafka key (``RecordKeyError``): it is read into none
    of the session's summaries. The projector stored it all the same: the prompt showed it, search found it,
    until a boundary hid it, summarized by no one."""

    def unkeyed(value: dict[str, Any], offset: int) -> SourceRecord:
        return dataclasses.replace(record(EVENTS, value, offset=offset), key=None)

    delete = {"type": "delete_session", "command_id": "d1", "app_name": key.app_name, "user_id": key.user_id,
              "session_id": key.session_id}  # fmt: skip
    outcome = await store.apply(
        record(EVENTS, event(key, "e1", at=1, content="有键的消息 MK-1"), offset=60),
        unkeyed(event(key, "e2", at=2, content="孤儿记录 MK-2"), 61),
        unkeyed(delete, 62),
        record(EVENTS, event(key, "e3", at=3, content="有键的消息 MK-3"), offset=63),
    )
    assert [(d.stage, d.source_offset, d.error_class, d.key_b64) for d in store.dead] == [
        ("project", 61, "RecordKeyError", None), ("project", 62, "RecordKeyError", None)]  # fmt: skip
    assert all(f"{key.app_name}/{key.user_id}/{key.session_id} has no Kafka key" in d.reason for d in store.dead)
    assert outcome.events == 2 and outcome.deletes == 0
    assert [e.event_id for e in await store.reader.events_after_boundary(key)] == ["e1", "e3"]
    for query in ("孤儿记录", "MK-2"):
        assert not await store.reader.session_search(key, query, "current_session", top_k=10)
    assert await store.projector.load_offsets() == {(EVENTS, 0): 64}


@pytest.mark.parametrize("field", ["created_at", "cutoff_at"])
async def test_a_summary_whose_time_leaves_the_calendar_in_utc_is_dead_lettered(
    store: Store, key: SessionKey, field: str
) -> None:
    """Year 1 at +01:00 is before year 1 in UTC: converting it raised OverflowError (in the schema's
    validator, or in the driver writing ``created_at``), which stopped the projector at every restart."""
    bad = summary(key, 1, text="坏的摘要", cutoff=1, last_event_id="e1")
    if field == "created_at":
        bad["created_at"] = "0001-01-01T00:30:00+01:00"
    else:
        bad["boundary"]["cutoff_at"] = "0001-01-01T00:30:00+01:00"
    outcome = await store.apply(
        record(EVENTS, event(key, "e1", at=1, content="消息 MK-1"), offset=70),
        record(SUMMARIES, bad, offset=20),
        record(SUMMARIES, summary(key, 1, text="好的摘要", cutoff=1, last_event_id="e1"), offset=21),
    )
    assert [(d.source_offset, d.error_class) for d in store.dead] == [(20, "ValidationError")]
    assert f"{field} is out of range once in UTC" in store.dead[0].reason
    assert outcome.summaries == 1
    assert await store.reader.get_summary_text(key) == "好的摘要"
    assert await store.projector.load_offsets() == {(EVENTS, 0): 71, (SUMMARIES, 0): 22}


async def test_a_record_over_the_record_limit_is_dead_lettered_as_the_worker_refuses_it(
    store: Store, key: SessionKey
) -> None:
    """The topic takes ``max_record_bytes`` + 64 KiB; the worker refuses what is over the limit
    (``OversizedRecord``). The projector stored it all the same: the prompt showed an event that no
    summary reads, until a boundary hid it. CJK text: the limit is in UTF-8 bytes, not characters."""
    limit = 20_000
    ks = store.settings.cassandra.keyspace
    projector = Projector(store.session, ks, events_topic=EVENTS, summaries_topic=SUMMARIES, consumer_group="g-lim",
                          max_record_bytes=limit)  # fmt: skip
    indexer = RecallIndexer(store.session, ks, events_topic=EVENTS, consumer_group="g-lim-index",
                            max_record_bytes=limit)  # fmt: skip
    big = record(EVENTS, event(key, "e2", at=2, content="超大记录 MK-BIG " + "长" * 8_000), offset=81)
    assert big.value is not None and len(big.value) > limit > 8_000 + 20
    records = [
        record(EVENTS, event(key, "e1", at=1, content="普通消息 MK-1"), offset=80),
        big,
        record(EVENTS, event(key, "e3", at=3, content="普通消息 MK-3"), offset=82),
    ]
    dead: list[Any] = []

    async def sink(letter: Any) -> None:
        dead.append(letter)

    outcome = await projector.project(records, sink)
    await indexer.project(records, sink)
    assert [(d.stage, d.source_offset, d.error_class) for d in dead] == [("project", 81, "OversizedRecord")]
    assert dead[0].reason == f"record of {len(big.value)} bytes exceeds the limit of {limit} bytes"
    assert outcome.events == 2
    assert [e.event_id for e in await store.reader.events_after_boundary(key)] == ["e1", "e3"]
    assert not await store.reader.session_search(key, "超大记录", "current_session", top_k=10)


async def test_a_second_key_or_partition_of_a_session_is_dead_lettered_as_the_worker_does(
    store: Store, key: SessionKey
) -> None:
    """The worker fixes a session's key and partition at its first record and refuses (``RecordKeyError``)
    a later record of it with another key or on another partition: no summary holds it. The projector
    stored it: the prompt showed it until a boundary hid it, and search found it. It refuses it now, with
    the worker's reason (the indexer skips it), across a ``delete_session`` (the worker keeps the key) and
    a restart (an empty memory reads the key back)."""

    def keyed(value: dict[str, Any] | bytes, offset: int, record_key: bytes, partition: int = 0) -> SourceRecord:
        return dataclasses.replace(record(EVENTS, value, offset=offset, partition=partition), key=record_key)

    first, second = "键/一".encode(), b"another-key"
    delete = {"type": "delete_session", "command_id": "d1", "app_name": key.app_name, "user_id": key.user_id,
              "session_id": key.session_id}  # fmt: skip
    outcome = await store.apply(
        keyed(event(key, "e1", at=1, content="第一条 MK-1"), 80, first),
        keyed(event(key, "e2", at=2, content="别的键 MK-2 zebra"), 81, second),
        keyed(event(key, "e3", at=3, content="别的分区 MK-3 yak"), 5, first, partition=1),
        keyed(event(key, "e4", at=4, content="第四条 MK-4"), 82, first),
    )
    assert outcome.events == 2
    await store.apply(keyed(delete, 83, second), keyed(event(key, "e5", at=5, content="删除之后 MK-5"), 84, second))
    ks = store.settings.cassandra.keyspace
    store.projector = Projector(store.session, ks, events_topic=EVENTS, summaries_topic=SUMMARIES, consumer_group="g")
    store.indexer = RecallIndexer(store.session, ks, events_topic=EVENTS, consumer_group="g-index")
    outcome = await store.apply(
        keyed(event(key, "e6", at=6, content="重启之后 MK-6 walrus"), 85, second),
        keyed(event(key, "e7", at=7, content="第七条 MK-7"), 86, first),
    )
    assert outcome.events == 1
    assert [(d.stage, d.source_offset, d.error_class) for d in store.dead] == [
        ("project", 81, "RecordKeyError"), ("project", 5, "RecordKeyError"), ("project", 83, "RecordKeyError"),
        ("project", 84, "RecordKeyError"), ("project", 85, "RecordKeyError")]  # fmt: skip
    assert all("'键/一'" in d.reason for d in store.dead)
    assert "'another-key'" in store.dead[0].reason and "partition 1" in store.dead[1].reason
    assert [e.event_id for e in await store.reader.events_after_boundary(key)] == ["e1", "e4", "e7"]
    for query in ("zebra", "yak", "walrus", "别的键"):  # the indexer judges the same: search does not find them either
        assert not await store.reader.session_search(key, query, "current_session", top_k=10), query
    assert await store.reader.session_search(key, "第七条", "current_session", top_k=10)


async def test_a_summarize_command_fixes_the_sessions_key_as_it_does_for_the_worker(
    store: Store, key: SessionKey
) -> None:
    command = {"type": "summarize", "command_id": "c1", "app_name": key.app_name, "user_id": key.user_id,
               "session_id": key.session_id, "filter_key": ""}  # fmt: skip
    await store.apply(
        dataclasses.replace(record(EVENTS, command, offset=90), key=b"command-key"),
        dataclasses.replace(record(EVENTS, event(key, "e1", at=1, content="命令之后 MK-1"), offset=91), key=b"k"),
        dataclasses.replace(record(EVENTS, event(key, "e2", at=2, content="命令的键 MK-2"), offset=92),
                            key=b"command-key"),
    )  # fmt: skip
    assert [(d.source_offset, d.error_class) for d in store.dead] == [(91, "RecordKeyError")]
    assert [e.event_id for e in await store.reader.events_after_boundary(key)] == ["e2"]


async def test_an_indexer_ahead_of_the_projector_never_replaces_the_key_the_projector_fixed(
    store: Store, key: SessionKey
) -> None:
    """The review's sequence: a session projected before ``session_record_keys`` existed (no row), its next
    records keyed K2 (wrong: the worker refused it) then K1. An indexer behind the projector, reading the
    K2 record, fixed K2 and wrote it: the projector then read K2 and refused every K1 event the worker
    summarizes and the prompt must show (also after a restart, whenever the indexer's write came last).
    The indexer now reads the projector's rows and writes none."""

    def keyed(value: dict[str, Any], offset: int, record_key: bytes) -> SourceRecord:
        return dataclasses.replace(record(EVENTS, value, offset=offset), key=record_key)

    async def sink(letter: DeadLetter) -> None:
        store.dead.append(letter)

    wrong, right = (
        keyed(event(key, "e1", at=1, content="错的键 MK-1"), 60, b"K2"),
        keyed(event(key, "e2", at=2, content="对的键 MK-2"), 61, "键/一".encode()),
    )
    # Upgraded: the projector stored the wrong record before the rule existed and is past it; the
    # indexer, behind, reads it now and fixes K2 for itself; then the projector reads the right one.
    await store.indexer.project([wrong], sink)
    assert (await store.projector.project([right], sink)).events == 1, [d.reason for d in store.dead]
    await store.indexer.project([right], sink)
    ks = store.settings.cassandra.keyspace
    store.projector = Projector(store.session, ks, events_topic=EVENTS, summaries_topic=SUMMARIES, consumer_group="g")
    outcome = await store.projector.project(
        [keyed(event(key, "e3", at=3, content="重启之后 MK-3"), 62, "键/一".encode())], sink
    )
    assert outcome.events == 1, [d.reason for d in store.dead]
    assert [e.event_id for e in await store.reader.events_after_boundary(key)] == ["e2", "e3"]
