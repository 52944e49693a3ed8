"""An event id reused with other content is refused by the worker and the projector alike, end to end: real
Kafka, a worker and a projector process, Cassandra, a model that echoes the markers it is sent.

Every record carries a marker. The promise: each marker of a kept record is in the served summary (the
model echoes every marker of its request, the previous summary's included) or among the events the
assembled request shows; each marker of a refused record is in a dead letter of both stages, with the same
class (``EventIdReused``) and reason, and in no prompt. Before, a record reusing an event id with other
content replaced the first record's row on the read side (same timestamp) or added a row no summary held
(another timestamp), while the worker summarized the first — or, once a boundary had passed the first,
dropped the record as "published again" without a word. An exact duplicate (a producer's retry) stays
silent. The worker's memory of a session's ids outlives a restart: a new worker process reads it from the
log.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from schemas import SessionEvent, SessionKey
from schemas.event_ids import content_digest
from schemas.settings import Settings
from streams.client import DistillClient
from tests.integration.pipeline_support import (
    MarkedSession,
    ProjectorProcess,
    WorkerProcess,
    create_topics,
    echo_mk_markers,
    scripted_pipeline_settings,
)
from tests.integration.test_pipeline_refusals import assert_markers_accounted, dead_letters, settled
from tests.support.keyspaces import KeyspacePool
from tests.support.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

APP = "eventids"


class Pipeline:
    """A projector and one worker process, which a test may restart."""

    def __init__(self, settings: Settings, cql: Any, tmp: Path) -> None:
        self.settings, self.cql, self.tmp = settings, cql, tmp
        self.restarts = 0
        self.worker = WorkerProcess(settings, tmp / "worker-0.log")

    def restart_worker(self) -> None:
        self.worker.stop()
        self.restarts += 1
        self.worker = WorkerProcess(self.settings, self.tmp / f"worker-{self.restarts}.log")


@pytest.fixture(scope="module")
def pipeline(
    service_settings: Settings, keyspaces: KeyspacePool, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pipeline]:
    from projections.cassandra_session import connect

    with OpenAIServer(default=echo_mk_markers) as llm:
        settings = scripted_pipeline_settings(
            service_settings, llm.base_url, partitions=2, topic_prefix="eventids",
            apps={APP: {"event_threshold": 3}}, job_timeout_s=60,
        )  # fmt: skip
        keyspace = keyspaces.lease()
        settings.cassandra.keyspace = keyspace
        tmp = tmp_path_factory.mktemp("eventids")
        asyncio.run(create_topics(settings))
        cluster, cql = connect(settings.cassandra)
        projector = ProjectorProcess(settings, tmp / "projector.log")
        pipe = Pipeline(settings, cql, tmp)
        try:
            yield pipe
            assert pipe.worker.proc.poll() is None, pipe.worker.log_text()[-4000:]
            assert projector.proc.poll() is None, projector.log_text()[-4000:]
        finally:
            pipe.worker.stop()
            projector.stop()
            cluster.shutdown()
            keyspaces.release(keyspace)


def reused(event: SessionEvent, marker: str, *, later_s: float = 0) -> SessionEvent:
    """``event``'s id with other content (``marker`` in its text), stamped ``later_s`` after it."""
    return event.model_copy(
        update={
            "message": event.message.model_copy(update={"content": f"other content {marker}"}),
            "timestamp": event.timestamp + timedelta(seconds=later_s),
        }
    )


async def publish(client: DistillClient, key: bytes, events: list[SessionEvent]) -> list[tuple[int, int]]:
    return [await client.publish_raw(key, e.model_dump_json().encode()) for e in events]


def check(
    letters: dict[Any, dict[str, Any]],
    refused: dict[tuple[int, int], SessionEvent],
    firsts: dict[str, SessionEvent],
    kept: list[str],
    gone: list[str],
    read: Any,
    summary: str,
) -> None:
    """Both sides refused exactly ``refused`` (by coordinates) with ``EventIdReused`` and the same reason
    naming the id and both digests; every kept marker is in the summary or the request, no refused one is."""
    assert set(letters) == {(stage, *c) for stage in ("track", "project") for c in refused}, letters
    for coords, event in refused.items():
        track, project = letters[("track", *coords)], letters[("project", *coords)]
        assert track["error_class"] == project["error_class"] == "EventIdReused"
        assert track["reason"] == project["reason"]
        first = firsts[event.event_id]
        for named in (repr(event.event_id), content_digest(first), content_digest(event)):
            assert named in track["reason"], (named, track["reason"])
    assert_markers_accounted(kept, gone, summary, read, letters)


async def test_an_event_id_reused_with_other_content_is_refused_by_the_worker_and_the_projector_alike(
    pipeline: Pipeline,
) -> None:
    settings, cql = pipeline.settings, pipeline.cql
    s = MarkedSession(APP, text="第{n}步")
    sk = SessionKey(APP, s.b.user_id, s.b.session)
    key = sk.kafka_key()
    first = s.events(4)
    firsts = {e.event_id: e for e in first}
    tag = s.tag
    same_ts = reused(first[1], f"MK-{tag}-901")  # the read side's row replaced, before
    other_ts = reused(first[0], f"MK-{tag}-902", later_s=0.5)  # a second row no summary held, before
    async with DistillClient(settings) as client:
        await publish(client, key, first)
        c1, c2 = await publish(client, key, [same_ts, other_ts])
        (dup,) = await publish(client, key, [first[1]])  # a producer's retry: the same bytes, silent
        await publish(client, key, s.events(3))
        await dead_letters(settings, s.b.session, {(stage, *c) for stage in ("track", "project") for c in (c1, c2)})
        read, _ = await settled(settings, cql, sk, s.markers)
        assert read.summary is not None and read.summary.version >= 1, "no summary yet: no boundary to pass"
        # After a boundary passed them: reused stamped before the cutoff (the worker dropped it as "published
        # again", before) and after it (summarized again while the read side showed a second row, before).
        early = reused(first[0], f"MK-{tag}-903")
        late = reused(first[2], f"MK-{tag}-904", later_s=3600)
        c3, c4 = await publish(client, key, [early, late])
        await publish(client, key, s.events(3))
    refused = {c1: same_ts, c2: other_ts, c3: early, c4: late}
    gone = [f"MK-{tag}-90{n}" for n in range(1, 5)]
    letters = await dead_letters(settings, s.b.session, {(st, *c) for st in ("track", "project") for c in refused})
    read, summary = await settled(settings, cql, sk, s.markers)
    check(letters, refused, firsts, s.markers, gone, read, summary)
    assert ("track", *dup) not in letters and ("project", *dup) not in letters


async def test_the_worker_remembers_a_sessions_event_ids_across_a_restart(pipeline: Pipeline) -> None:
    settings, cql = pipeline.settings, pipeline.cql
    s = MarkedSession(APP, text="step {n}")
    sk = SessionKey(APP, s.b.user_id, s.b.session)
    key = sk.kafka_key()
    first = s.events(2)
    firsts = {e.event_id: e for e in first}
    before = reused(first[1], f"MK-{s.tag}-901")
    async with DistillClient(settings) as client:
        await publish(client, key, first)
        (c1,) = await publish(client, key, [before])
        # The worker has judged the session's records: its memory of them goes with the process.
        await dead_letters(settings, s.b.session, {("track", *c1), ("project", *c1)})
        pipeline.restart_worker()
        after = reused(first[0], f"MK-{s.tag}-902")
        (c2,) = await publish(client, key, [after])
        await publish(client, key, s.events(3))
    refused = {c1: before, c2: after}
    letters = await dead_letters(settings, s.b.session, {(st, *c) for st in ("track", "project") for c in refused})
    read, summary = await settled(settings, cql, sk, s.markers)
    check(letters, refused, firsts, s.markers, [f"MK-{s.tag}-901", f"MK-{s.tag}-902"], read, summary)
