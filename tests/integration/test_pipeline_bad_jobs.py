"""Records on the jobs (and summaries) topic that no distill build wrote (by hand, another tool, a damaged record): real
Kafka, one worker process, a model that echoes markers.

Each must give a dead letter naming its coordinates and why it is refused, and the partition must
go on: the sessions whose jobs come after it are summarized over every event (the oracle: every
event carries a marker, the model's answer lists every marker of its request).
"""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from schemas.settings import Settings
from streams.client import DistillClient
from streams.clients.kafka_config import producer_kwargs
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

MARKER = MK_MARKER


@pytest.fixture(scope="module")
def pipeline(service_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    with OpenAIServer(default=echo_mk_markers) as server:
        settings = scripted_pipeline_settings(
            service_settings, server.base_url, partitions=1, topic_prefix="badjobs",
            apps={"bj": {"event_threshold": 3}}, job_timeout_s=60,
        )  # fmt: skip
        asyncio.run(create_topics(settings))
        with workers(settings, tmp_path_factory.mktemp("badjobs")) as procs:
            LOGS[:] = [p.log_path for p in procs]
            PROCS[:] = procs
            yield settings
            for p in procs:
                assert p.proc.poll() is None, p.log_text()[-4000:]


@pytest.fixture()
async def client(pipeline: Settings) -> AsyncIterator[DistillClient]:
    async with DistillClient(pipeline) as c:
        yield c


class Marked(MarkedSession):
    def __init__(self) -> None:
        super().__init__("bj", text="第{n}步")


BAD_JOBS: list[tuple[bytes | None, str, str]] = [
    (b"\xff\xfe not json", "RecordDecodeError", "not valid JSON"),
    (b"{oops", "RecordDecodeError", "not valid JSON"),
    (b'{"type": "summary_job", "note": "\u8001\u7248\u672c"}', "ValidationError", "job_id"),  # an older build's
    (b"[1, 2]", "RecordDecodeError", "expected a JSON object"),
    (b'{"job_id": NaN}', "RecordDecodeError", "NaN"),
    (None, "RecordDecodeError", "tombstone"),
]

LOGS: list[Path] = []
PROCS: list[Any] = []


async def test_malformed_jobs_are_dead_lettered_and_the_partition_goes_on(
    pipeline: Settings, client: DistillClient
) -> None:
    tag = uuid.uuid4().hex[:8].encode()
    producer = AIOKafkaProducer(**producer_kwargs(pipeline.kafka))
    await producer.start()
    try:
        offsets = []
        for bad, _, _ in BAD_JOBS:
            md = await producer.send_and_wait(pipeline.topics.jobs, bad, key=b"bj/" + tag, partition=0)
            offsets.append(md.offset)
    finally:
        await producer.stop()
    sessions = [Marked() for _ in range(2)]
    for s in sessions:
        await client.publish_many(s.events(4))
    last = {s.b.session: f"{s.b.session}-e{s.b.n}" for s in sessions}

    def finals(records: list[Any]) -> dict[str, dict[str, Any]]:
        return {
            s["session_id"]: s
            for s in summaries_of(records)
            if last.get(s["session_id"]) == s["boundary"]["last_event_id"]
        }

    found = finals(await read_topic(pipeline, pipeline.topics.summaries, until=lambda r: len(finals(r)) == 2))
    for s in sessions:
        assert set(MARKER.findall(found[s.b.session]["summary"])) == set(s.markers)

    def letters(records: list[Any]) -> dict[int, dict[str, Any]]:
        out = {}
        for r in records:
            d = json.loads(r.value)
            if d["source_topic"] == pipeline.topics.jobs:
                out[d["source_offset"]] = d
        return out

    found_letters = letters(
        await read_topic(pipeline, pipeline.topics.dead_letters, until=lambda r: len(letters(r)) >= len(BAD_JOBS))
    )
    assert sorted(found_letters) == offsets
    for offset, (bad, error_class, reason) in zip(offsets, BAD_JOBS, strict=True):
        letter = found_letters[offset]
        assert (letter["error_class"], letter["stage"]) == (error_class, "summarize")
        assert reason in letter["reason"], letter["reason"]
        assert (base64.b64decode(letter["value_b64"]) if letter["value_b64"] else None) == bad
        assert letter["key_b64"] == base64.b64encode(b"bj/" + tag).decode()
    # The summarize agent never stopped on them (each crash stopped every partition's jobs until its
    # restart), and no log line quotes a record.
    log_text = "\n".join(p.read_text(errors="replace") for p in LOGS)
    assert "Crashed" not in log_text and "summary_job" not in log_text


async def test_a_summaries_record_nested_too_deep_is_skipped_and_the_worker_goes_on(
    pipeline: Settings, client: DistillClient
) -> None:
    """``RecursionError`` (no ``ValueError``) out of the absorb stage's decoder stopped the worker, and
    again at every restart."""
    deep = b'{"type": "summary", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    producer = AIOKafkaProducer(**producer_kwargs(pipeline.kafka))
    await producer.start()
    try:
        await producer.send_and_wait(pipeline.topics.summaries, deep, key=b"bj/deep", partition=0)
    finally:
        await producer.stop()
    session = Marked()
    await client.publish_many(session.events(4))
    last = f"{session.b.session}-e{session.b.n}"

    def final(records: list[Any]) -> list[dict[str, Any]]:
        ours = [r for r in records if r.key != b"bj/deep"]  # json.loads, in summaries_of, cannot read it
        return [s for s in summaries_of(ours) if s["boundary"]["last_event_id"] == last]

    (summary,) = final(await read_topic(pipeline, pipeline.topics.summaries, until=final))
    assert set(MARKER.findall(summary["summary"])) == set(session.markers)
    assert all(p.proc.poll() is None for p in PROCS)
    log_text = "\n".join(p.read_text(errors="replace") for p in LOGS)
    assert "undecodable summaries record skipped" in log_text and "stopping the worker" not in log_text
