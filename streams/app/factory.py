"""``create_app(settings)``: the composition root of the Faust worker.

Topics come from settings; codecs turn records into pydantic models; three
thin agents do decode → handler → send:

* ``track`` (events topic): the trigger fold into the ``track-state`` table,
  jobs to the jobs topic, dead letters for invalid records;
* ``absorb`` (summaries topic): summaries and failures advance or release the
  table's keys (same table, co-partitioned);
* ``summarize`` (jobs topic): hands each job to the bounded :class:`JobPool`
  (``async_summary_num`` concurrent, one per key, acked in order).

Every record is sent to the partition it came from, so a session's events,
jobs, summaries and table entries always share one partition number whatever
partitioner the producers used. Clients open when the worker starts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any, cast

import faust

from schemas.settings import Settings
from streams import metrics
from streams.app.codecs import (
    EVENTS_CODEC,
    JOB_CODEC,
    KEY_CODEC,
    STATE_CODEC,
    SUMMARY_CODEC,
    register_codecs,
)
from streams.app.coordinates import Coordinates
from streams.app.extensions import Extensions
from streams.app.runtime import Topics, WorkerRuntime, job_pool_key
from streams.app.sweep import sweep_commands
from streams.app.track import TrackHandler
from streams.rules.policy import policies_from_settings
from streams.summarizer import SummarizerLike, build_summarizer

log = logging.getLogger(__name__)

TABLE_NAME = "track-state"


@dataclass(frozen=True)
class ReplayOptions:
    """Run as a replay: own consumer group and output topics, optional session filter."""

    run_id: str
    sessions: frozenset[str] = frozenset()
    preload_from: str | None = None
    from_latest: bool = False


def replay_topics(settings: Settings, run_id: str) -> Topics:
    t = settings.topics
    return Topics(t.events, f"{t.jobs}.replay-{run_id}", f"{t.summaries}.replay-{run_id}", t.dead_letters)


def _summarizers(settings: Settings, ext: Extensions) -> Callable[[str], SummarizerLike]:
    if ext.summarizer_for is not None:
        return ext.summarizer_for
    built: dict[str, SummarizerLike] = {}

    def summarizer_for(app_name: str) -> SummarizerLike:
        found = built.get(app_name)
        if found is None:
            found = build_summarizer(settings, app_name=app_name, hooks=ext.hooks)
            built[app_name] = found
        return found

    return summarizer_for


def create_app(
    settings: Settings,
    *,
    extensions: Extensions | None = None,
    replay: ReplayOptions | None = None,
) -> faust.App:
    """Build the Faust app (topics, table, agents, timers). Nothing connects until it starts."""
    ext = extensions or Extensions()
    register_codecs(settings.kafka.max_record_bytes)
    t = settings.topics
    topics = replay_topics(settings, replay.run_id) if replay else Topics(t.events, t.jobs, t.summaries, t.dead_letters)
    app_id = f"{settings.worker.app_id}-replay-{replay.run_id}" if replay else settings.worker.app_id
    app = faust.App(
        app_id,
        broker=[f"kafka://{s}" for s in settings.kafka.bootstrap_list],
        store="memory://" if replay else settings.worker.store,
        autodiscover=False,
        topic_partitions=t.partitions,
        topic_replication_factor=t.replication_factor,
        table_standby_replicas=0,
        web_enabled=settings.worker.web_port > 0,
        web_port=max(settings.worker.web_port, 1),
        web_bind="127.0.0.1",
        broker_commit_every=1000,
        broker_commit_interval=1.0,
        consumer_auto_offset_reset="latest" if replay and replay.from_latest else "earliest",
        stream_wait_empty=False,
        producer_max_request_size=settings.kafka.max_record_bytes + 65536,
        consumer_max_fetch_size=settings.kafka.max_record_bytes + 65536,
        producer_acks=-1,
        broker_client_id=settings.kafka.client_id,
        stream_buffer_maxsize=4096,
        # A crashed worker's partitions move on after ~10 s rather than Faust's 60 s default.
        broker_session_timeout=10.0,
        broker_heartbeat_interval=2.0,
    )
    sessions = replay.sessions if replay else frozenset()
    policies = ext.policies or policies_from_settings(settings.summary)
    track = TrackHandler(
        policies,
        accept=(lambda sk: sk.session_id in sessions) if sessions else None,
        job_origin="replay" if replay else None,
        dead_letter_limit=min(64 * 1024, settings.kafka.max_record_bytes // 2),
        optimistic=replay is not None,
    )
    runtime = WorkerRuntime(settings, topics, track, _summarizers(settings, ext))
    if replay is None or not replay.preload_from:
        runtime.cache_ready.set()

    async def send(topic: str, key: bytes, value: bytes, partition: int, headers: Any) -> Any:
        return await app.producer.send_and_wait(topic, key, value, partition, None, headers or None)

    runtime.send = send
    events_topic = app.topic(topics.events, key_serializer="raw", value_serializer=EVENTS_CODEC)
    jobs_topic = app.topic(topics.jobs, key_serializer="raw", value_serializer=JOB_CODEC, partitions=t.partitions)
    summaries_topic = app.topic(
        topics.summaries, key_serializer="raw", value_serializer=SUMMARY_CODEC, partitions=t.partitions
    )
    # Faust derives a table's serializers from its key/value types; ours are codecs, so the
    # changelog topic (read back on recovery) is declared with them explicitly.
    changelog = app.topic(
        f"{app_id}-{TABLE_NAME}-changelog",
        key_serializer=KEY_CODEC,
        value_serializer=STATE_CODEC,
        partitions=t.partitions,
        compacting=True,
        deleting=False,
        acks=False,
        internal=True,
        maxsize=131_072,
        allow_empty=True,
    )
    table = app.Table(
        TABLE_NAME,
        partitions=t.partitions,
        changelog_topic=changelog,
        help="Trigger state per (session, filter key)",
    )
    cast(Any, table).key_serializer = KEY_CODEC
    cast(Any, table).value_serializer = STATE_CODEC

    @app.agent(events_topic, name="track", concurrency=1)
    async def track_sessions(stream: faust.StreamT[Any]) -> None:
        async for event in stream.events():
            msg = event.message
            coords = Coordinates(msg.topic, msg.partition, msg.offset)
            at = datetime.fromtimestamp(msg.timestamp, UTC) if msg.timestamp else datetime.now(UTC)
            out = track.on_record(event.value, coords, table, key=event.key, log_time=at)
            metrics.EVENTS.labels(type(event.value).__name__).inc()
            runtime.track_logged(out, coords)
            key = msg.key or b""
            for job in out.jobs:
                await app.producer.send(topics.jobs, key, job.model_dump_json().encode(), msg.partition, None, None)
            for reply in out.replies:
                await app.producer.send(
                    topics.summaries, key, reply.model_dump_json().encode(), msg.partition, None, None
                )
            if out.dead_letter is not None:
                await send(topics.dead_letters, key, out.dead_letter.model_dump_json().encode(), msg.partition, None)

    @app.agent(summaries_topic, name="absorb", concurrency=1)
    async def absorb_summaries(stream: faust.StreamT[Any]) -> None:
        async for record in stream:
            track.on_summary_record(record, table)

    @app.agent(jobs_topic, name="summarize", concurrency=1)
    async def summarize_jobs(stream: faust.StreamT[Any]) -> None:
        async for event in cast(Any, stream).noack().events():
            msg = event.message
            coords = Coordinates(msg.topic, msg.partition, msg.offset)
            job = event.value
            produced = msg.timestamp if msg.timestamp else None
            await runtime.pool.submit(
                job_pool_key(job), msg.partition, msg.offset,
                partial(runtime.run_job, job, coords, msg.key or b"", produced),
                event.ack,
            )  # fmt: skip
            metrics.JOBS_IN_FLIGHT.set(len(runtime.pool))

    @cast(Any, app.on_partitions_revoked).connect  # type: ignore[untyped-decorator]  # mode signals: loose types
    async def _revoked(app_: Any, *args: Any, signal: Any = None, **_: Any) -> None:
        revoked: set[Any] = args[0] if args else _.get("revoked", set())
        await runtime.on_revoked({tp.partition for tp in revoked if tp.topic == topics.jobs})

    @cast(Any, app.on_partitions_assigned).connect  # type: ignore[untyped-decorator]
    async def _assigned(app_: Any, *args: Any, signal: Any = None, **_: Any) -> None:
        assigned: set[Any] = args[0] if args else _.get("assigned", set())
        mine = sorted(tp.partition for tp in assigned if tp.topic == topics.jobs)
        log.info("partitions assigned", extra={"topic": topics.jobs, "partitions": ",".join(map(str, mine))})

    @cast(Any, app.on_before_shutdown).connect  # type: ignore[untyped-decorator]
    async def _shutdown(app_: Any, *args: Any, signal: Any = None, **_: Any) -> None:
        await runtime.stop()

    if replay and replay.preload_from:
        preload_topic = replay.preload_from

        @app.task  # type: ignore[untyped-decorator]  # faust's decorators are untyped
        async def _preload() -> None:
            from streams.app.ledger import preload_cache

            try:
                for topic in await summary_topics(settings, preload_topic, exclude=topics.summaries):
                    loaded = await preload_cache(settings.kafka, topic, runtime.cache)
                    log.info("summary cache preloaded", extra={"topic": topic, "entries": loaded})
            finally:
                runtime.cache_ready.set()

    idle_after = settings.summary.idle_summary_after_s
    sweep_every = max(1.0, min(idle_after or 60.0, settings.summary.job_timeout_s) / 4)

    @app.timer(sweep_every)  # type: ignore[untyped-decorator]  # faust's decorators are untyped
    async def _sweep() -> None:
        now = datetime.now(UTC)
        commands = sweep_commands(
            (value for _, value in list(table.items())),
            now=now, idle_after_s=idle_after, job_timeout_s=settings.summary.job_timeout_s,
        )  # fmt: skip
        for partition, command in commands:
            await app.producer.send(
                topics.events,
                command.session_key.kafka_key(),
                command.model_dump_json().encode(),
                partition,
                None,
                None,
            )

    app.distill_runtime = runtime  # type: ignore[attr-defined]
    return app


async def summary_topics(settings: Settings, live: str, *, exclude: str) -> list[str]:
    """The live summaries topic and the outputs of earlier replays (the cache's sources)."""
    from aiokafka.admin import AIOKafkaAdminClient

    from streams.kafka_config import common_kwargs

    admin = AIOKafkaAdminClient(**common_kwargs(settings.kafka))
    await admin.start()
    try:
        names = await admin.list_topics()
    finally:
        await admin.close()
    return sorted(n for n in names if (n == live or n.startswith(f"{live}.replay-")) and n != exclude)
