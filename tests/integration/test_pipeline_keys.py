"""Any Kafka key layout, end to end: real Kafka, one worker process, a model that echoes markers.

Every event carries a marker; the test server's answer lists every marker of
its request (the previous summary included), so a session's last summary holds
the marker of every event it covers. Sessions keyed ``app:user:session``, by
the bare session id, by opaque bytes, or by a key several sessions share are
summarized over every event; a null key, or a second key for a session, is
dead-lettered with a reason naming the key(s) while the session goes on.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import murmur2

from schemas import SessionEvent, SessionKey
from schemas.settings import Settings
from streams.app.event_log import EventLogReader, RangePastLogEndError
from streams.client import DistillClient, SummaryUnavailableError
from streams.clients.kafka_config import producer_kwargs
from streams.rules.record_keys import describe_key
from tests.integration.pipeline_support import (
    MK_MARKER,
    MarkedSession,
    create_topics,
    echo_mk_markers,
    read_topic,
    scripted_pipeline_settings,
    summaries_of,
    workers,
)
from tests.support.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

PARTITIONS = 3
MARKER = MK_MARKER


@pytest.fixture(scope="module")
def pipeline(service_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    with OpenAIServer(default=echo_mk_markers) as server:
        settings = scripted_pipeline_settings(
            service_settings, server.base_url, partitions=PARTITIONS, topic_prefix="keys",
            apps={"keys": {"event_threshold": 3}}, job_timeout_s=60,
        )  # fmt: skip
        asyncio.run(create_topics(settings))
        with workers(settings, tmp_path_factory.mktemp("keys")) as procs:
            yield settings
            for p in procs:
                assert p.proc.poll() is None, p.log_text()[-4000:]


@pytest.fixture()
async def client(pipeline: Settings) -> AsyncIterator[DistillClient]:
    async with DistillClient(pipeline) as c:
        yield c


def partition_of(key: bytes) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % PARTITIONS


class Marked(MarkedSession):
    """A session's events, each with its own marker."""

    def __init__(self, user: str = "u1", session: str | None = None) -> None:
        super().__init__("keys", user, session)


async def publish(client: DistillClient, key: bytes | None, events: list[SessionEvent]) -> None:
    for e in events:
        await client.publish_raw(key, e.model_dump_json().encode())


async def final_summaries(settings: Settings, sessions: list[Marked], timeout: float = 90) -> dict[str, dict[str, Any]]:
    """Each session's summary whose boundary is its last event (waits for all of them)."""
    wanted = {(s.b.user_id, s.b.session): s.last_event_id for s in sessions}

    def found(records: list[Any]) -> dict[str, dict[str, Any]]:
        out = {}
        for summary in summaries_of(records):
            ident = (summary["user_id"], summary["session_id"])
            if summary["app_name"] == "keys" and wanted.get(ident) == summary["boundary"]["last_event_id"]:
                out[f"{ident[0]}/{ident[1]}"] = summary
        return out

    records = await read_topic(settings, settings.topics.summaries, timeout=timeout,
                               until=lambda r: len(found(r)) == len(wanted))  # fmt: skip
    return found(records)


async def test_every_key_layout_gets_summaries_covering_every_event(pipeline: Settings, client: DistillClient) -> None:
    colons, bare, opaque = Marked(), Marked(), Marked()
    shared_a, shared_b = Marked(user="u-shared"), Marked(user="u-shared")  # two sessions, one key: the user id
    twin = Marked(user="u-twin", session=bare.b.session)  # same session id as `bare`, another user, same key
    keyed = [
        (colons, f"keys:u1:{colons.b.session}".encode()),
        (bare, bare.b.session.encode()),
        (opaque, b"\x00\xfe" + uuid.uuid4().bytes),
        (shared_a, b"u-shared"),
        (shared_b, b"u-shared"),
        (twin, bare.b.session.encode()),
    ]
    sessions = [s for s, _ in keyed]
    for batch in range(2):  # two boundaries each: the second rolls the first summary forward
        for session, key in keyed:
            await publish(client, key, session.events(4))
        if batch == 0:
            await final_summaries(pipeline, sessions)
    finals = await final_summaries(pipeline, sessions)
    assert len(finals) == len(sessions)
    for session in sessions:
        summary = finals[f"{session.b.user_id}/{session.b.session}"]
        assert summary["version"] == 2
        assert set(MARKER.findall(summary["summary"])) == set(session.markers), summary["summary"]


async def test_null_and_second_keys_are_dead_lettered_naming_them(pipeline: Settings, client: DistillClient) -> None:
    nulled = Marked()
    await publish(client, None, nulled.events(1))
    mixed = Marked()
    key = f"keys:u1:{mixed.b.session}".encode()
    same_partition = next(k for i in range(1000) if partition_of(k := key + f"#{i}".encode()) == partition_of(key))
    other_partition = next(k for i in range(1000) if partition_of(k := key + f"#{i}".encode()) != partition_of(key))
    await publish(client, key, mixed.events(2))
    refused = [*mixed.events(1), *mixed.events(1)]
    mixed.markers = mixed.markers[:2]  # the refused events are not the session's (they are dead letters)

    def mine(records: list[Any]) -> list[dict[str, Any]]:
        letters = [json.loads(r.value) for r in records]
        ids = (nulled.b.session, mixed.b.session)
        found = [d for d in letters if any(i in base64.b64decode(d["value_b64"]).decode() for i in ids)]
        # Delivery is at least once: a record re-delivered after a rebalance is dead-lettered again,
        # with the same source coordinates. One per source record is what must hold.
        by_source = {(d["source_topic"], d["source_partition"], d["source_offset"]): d for d in found}
        return list(by_source.values())

    await publish(client, same_partition, refused[:1])
    # Partitions are consumed independently: only once the session's own partition is tracked up to
    # the refused record (its dead letter exists) is its first record known to be the one keyed `key`.
    # Published earlier, a record on another partition may be tracked first, and would fix its key.
    await read_topic(pipeline, pipeline.topics.dead_letters, until=lambda r: len(mine(r)) >= 2)
    await publish(client, other_partition, refused[1:])
    await publish(client, key, mixed.events(2))

    letters = mine(await read_topic(pipeline, pipeline.topics.dead_letters, until=lambda r: len(mine(r)) >= 3))
    assert [d["error_class"] for d in letters] == ["RecordKeyError"] * 3
    by_key = {d["key_b64"]: d["reason"] for d in letters}
    assert "no Kafka key (null)" in by_key[None] and nulled.b.session in by_key[None]
    for second in (same_partition, other_partition):
        reason = by_key[base64.b64encode(second).decode()]
        assert describe_key(second) in reason and describe_key(key) in reason
    # the session goes on with its own key: its summary covers its four events, not the refused ones
    (summary,) = (await final_summaries(pipeline, [mixed])).values()
    assert set(MARKER.findall(summary["summary"])) == set(mixed.markers)
    assert all(e.event_id not in json.dumps(summary) for e in refused)


async def test_a_sync_request_is_answered_under_the_sessions_own_key(client: DistillClient) -> None:
    """With the canonical key the request is refused at once, naming both keys (it used to read
    another partition's offsets: nothing, or a stalled partition); with the session's key it is summarized."""
    session = Marked()
    key = f"keys:u1:{session.b.session}".encode()
    await publish(client, key, session.events(2))
    sk = SessionKey(session.b.app_name, session.b.user_id, session.b.session)
    with pytest.raises(SummaryUnavailableError) as refused:
        await client.request_summary(sk, force=True, timeout=30)
    assert refused.value.failure.error_class == "RecordKeyError"
    assert (
        describe_key(key) in refused.value.failure.reason
        and describe_key(sk.kafka_key()) in refused.value.failure.reason
    )
    summary = await client.request_summary(sk, force=True, timeout=30, key=key)
    assert summary is not None and summary.boundary.last_event_id == session.last_event_id
    assert set(MARKER.findall(summary.summary)) == set(session.markers)


async def test_a_read_past_the_partitions_end_fails_at_once(pipeline: Settings) -> None:
    """A range the partition does not hold cannot be a session's: no 30 s stall, no retry loop."""
    reader = EventLogReader(pipeline.kafka, pipeline.topics.events)
    try:
        started = time.monotonic()
        with pytest.raises(RangePastLogEndError, match="ends at offset"):
            await reader.read(0, 0, 1_000_000, b"any")
        assert time.monotonic() - started < 10
    finally:
        await reader.stop()


async def test_an_undecodable_summaries_record_is_skipped_and_sessions_go_on(
    pipeline: Settings, client: DistillClient
) -> None:
    # Whatever lands on the summaries topic (another writer, a damaged record), the worker's
    # absorb stage skips what it cannot decode: it neither stops nor stalls the partition.
    producer = AIOKafkaProducer(**producer_kwargs(pipeline.kafka))
    await producer.start()
    try:
        for p in range(PARTITIONS):
            for garbage in (b"\xff\xfe not json", b'{"type": "summary_failure"}', b"[1, 2]"):
                await producer.send_and_wait(pipeline.topics.summaries, garbage, key=b"k", partition=p)
    finally:
        await producer.stop()
    sessions = [Marked() for _ in range(PARTITIONS * 2)]
    for _ in range(2):
        for s in sessions:
            await publish(client, f"keys:u1:{s.b.session}".encode(), s.events(4))
        finals = await final_summaries(pipeline, sessions)
    assert all(set(s.markers) <= set(MARKER.findall(finals[f"u1/{s.b.session}"]["summary"])) for s in sessions)
