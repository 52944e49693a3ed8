"""The worker and the projector refuse the same records, end to end: real Kafka, a worker and a projector
process, Cassandra, a model that echoes the markers it is sent.

Every event carries a marker. The promise: each marker is in the served summary (the model echoes every
marker of its request, the previous summary's included), or among the events the assembled request shows
(the projector's rows), or in a dead letter with the reason — and a record one side refuses, the other
refuses too, with the same reason. A record the worker refused but the projector stored showed in the
prompt until a boundary hid it, and no summary ever held it; a delete the worker refused but the projector
applied removed events from the prompt that the worker went on summarizing.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
from aiokafka.partitioner import murmur2

from projections.context_read import ContextRead, ContextReader
from schemas import DeleteSession, SessionEvent, SessionKey
from schemas.settings import Settings
from streams.client import DistillClient
from tests.integration.pipeline_support import (
    MK_MARKER,
    MarkedSession,
    echo_mk_markers,
    live_pipeline,
    read_topic,
    scripted_pipeline_settings,
    summaries_of,
)
from tests.support.keyspaces import KeyspacePool
from tests.support.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

PARTITIONS = 3
APP = "refusals"


@pytest.fixture(scope="module")
def pipeline(
    service_settings: Settings, keyspaces: KeyspacePool, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Settings, Any]]:
    with OpenAIServer(default=echo_mk_markers) as llm:
        settings = scripted_pipeline_settings(
            service_settings, llm.base_url, partitions=PARTITIONS, topic_prefix="refusals",
            apps={APP: {"event_threshold": 3}}, job_timeout_s=60,
        )  # fmt: skip
        keyspace = keyspaces.lease()
        try:
            with live_pipeline(settings, keyspace, tmp_path_factory.mktemp("refusals")) as cql:
                yield settings, cql
        finally:
            keyspaces.release(keyspace)


def partition_of(key: bytes) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % PARTITIONS


async def publish(client: DistillClient, key: bytes | None, events: list[SessionEvent]) -> list[tuple[int, int]]:
    return [await client.publish_raw(key, e.model_dump_json().encode()) for e in events]


def letters_of(records: list[Any], session: str) -> dict[tuple[str, int, int], dict[str, Any]]:
    """The session's dead letters by ``(stage, source partition, source offset)`` (delivery is at least
    once: a record delivered again is dead-lettered again, with the same coordinates)."""
    out = {}
    for r in records:
        d = json.loads(r.value)
        if session in base64.b64decode(d["value_b64"]).decode(errors="replace"):
            out[(d["stage"], d["source_partition"], d["source_offset"])] = d
    return out


async def dead_letters(settings: Settings, session: str, wanted: set[tuple[str, int, int]]) -> dict[Any, Any]:
    """The session's dead letters, once each of ``wanted`` is among them (or the wait ran out)."""
    records = await read_topic(settings, settings.topics.dead_letters, timeout=60,
                               until=lambda r: wanted <= set(letters_of(r, session)))  # fmt: skip
    return letters_of(records, session)


async def settled(settings: Settings, cql: Any, key: SessionKey, markers: list[str]) -> tuple[ContextRead, str]:
    """The read (and its summary's text) once the projector serves the session's newest summary and the
    read accounts for ``markers`` (or the wait ran out: the caller's assertions then say what is missing)."""
    reader = ContextReader(cql, settings.cassandra.keyspace)
    read, text = await reader.read(key), ""
    for _ in range(60):
        records = await read_topic(settings, settings.topics.summaries, timeout=5)
        mine = [s for s in summaries_of(records) if (s["user_id"], s["session_id"]) == key[1:]]
        newest = max((s["version"] for s in mine), default=0)
        read = await reader.read(key)
        text = read.summary.summary if read.summary is not None else ""
        shown = text + " ".join(e.message.content or "" for e in read.events)
        if newest and read.summary is not None and read.summary.version == newest and all(m in shown for m in markers):
            break
        await asyncio.sleep(1)
    return read, text


def assert_markers_accounted(
    kept: list[str], gone: list[str], summary: str, read: ContextRead, letters: dict[Any, Any]
) -> None:
    """The oracle: every kept marker in the summary or the assembled request; every refused one in a dead letter
    and in no prompt; the summary holds no marker it was not given."""
    shown = [e.message.content or "" for e in read.events]
    for marker in kept:
        assert marker in summary or any(marker in t for t in shown), (marker, summary, shown)
    lettered = " ".join(base64.b64decode(d["value_b64"]).decode() for d in letters.values())
    for marker in gone:
        assert marker in lettered and marker not in summary and not any(marker in t for t in shown), marker
    assert set(MK_MARKER.findall(summary)) <= set(kept)


async def test_a_second_key_or_partition_is_refused_by_the_worker_and_the_projector_alike(
    pipeline: tuple[Settings, Any],
) -> None:
    settings, cql = pipeline
    s = MarkedSession(APP, text="第{n}步 键")
    key = SessionKey(APP, s.b.user_id, s.b.session)
    first = f"{APP}:{s.b.user_id}:{s.b.session}".encode()
    same_partition = next(k for i in range(1000) if partition_of(k := first + f"#{i}".encode()) == partition_of(first))
    other_partition = next(k for i in range(1000) if partition_of(k := first + f"#{i}".encode()) != partition_of(first))
    async with DistillClient(settings) as client:
        await publish(client, first, s.events(2))
        refused = s.events(2)
        (second,) = await publish(client, same_partition, refused[:1])
        # Partitions are consumed independently: once both sides have refused the record on the session's
        # own partition, both have fixed its key there, and a record on another partition is the second.
        await dead_letters(settings, s.b.session, {("track", *second), ("project", *second)})
        (moved,) = await publish(client, other_partition, refused[1:])
        # A delete under another key is refused too: it removes nothing, on either side.
        delete = DeleteSession(app_name=APP, user_id=s.b.user_id, session_id=s.b.session, command_id="d1")
        deleted = await client.publish_raw(same_partition, delete.model_dump_json().encode())
        await publish(client, first, s.events(2))
    kept = [m for m in s.markers if not any(m in e.message.content for e in refused if e.message.content)]
    gone = [m for m in s.markers if m not in kept]

    refusals = {(stage, *c) for stage in ("track", "project") for c in (second, moved, deleted)}
    letters = await dead_letters(settings, s.b.session, refusals)
    read, summary = await settled(settings, cql, key, kept)

    # Worker and projector refuse the same records, with the same class and reason.
    assert set(letters) == refusals, letters
    for coords in (second, moved, deleted):
        track, project = letters[("track", *coords)], letters[("project", *coords)]
        assert track["error_class"] == project["error_class"] == "RecordKeyError"
        assert track["reason"] == project["reason"] and repr(first.decode()) in track["reason"]
    # Every marker is in the summary, in the assembled request, or in a dead letter; a refused one in no prompt.
    assert_markers_accounted(kept, gone, summary, read, letters)
