"""``create_app(settings)``: the composition root of the Faust worker.

Topics come from settings; codecs turn records into pydantic models; three
thin agents do decode → handler → send:

* ``track`` (events topic): the trigger fold into the ``track-state`` table,
  jobs to the jobs topic, dead letters for invalid records;
* ``absorb`` (summaries topic): summaries and failures advance or release the
  table's keys (same table, co-partitioned);
* ``summarize`` (jobs topic): hands each job to the bounded :class:`JobPool`
  (one at a time per key, acked in order; ``async_summary_num`` model calls at
  once, see ``WorkerRuntime.model_slots``), and each
  ``adopt_epoch`` the track agent forwarded (an epoch switch, decided where the
  heads are: ``WorkerRuntime.run_adoption``).

``track`` and ``absorb`` take their topics' records in batches straight from the
consumer (:class:`~streams.app.record_sink.RecordSink`), not one Faust event at a time.

Every record is sent to the partition it came from, so a session's events,
jobs, summaries and table entries always share one partition number whatever
partitioner the producers used. Clients open when the worker starts.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, cast

import faust
from aiokafka.errors import KafkaError
from faust.types import TP

from projections.kafka_metadata import install as track_sent_topics
from schemas import AdoptEpoch, DeleteSession, SessionEvent, SessionKey
from schemas.event_ids import FirstDigests
from schemas.settings import Settings
from streams import metrics
from streams.app import batch_drain, write_behind
from streams.app.batch import TableBatch
from streams.app.batch_produce import OrderedBatchSender, SentBatch, produce_fields
from streams.app.cache import SummaryCache
from streams.app.codecs import (
    EVENTS_CODEC,
    JOB_CODEC,
    KEY_CODEC,
    STATE_CODEC,
    SUMMARY_CODEC,
    register_codecs,
)
from streams.app.coordinates import Coordinates
from streams.app.decoding import Rejected, decode_event_record, decode_job_record, decode_summary_record
from streams.app.event_ids import Unknown, learn
from streams.app.extensions import Extensions
from streams.app.fetch_wait import FetchWait
from streams.app.ingest_first import IngestFirst
from streams.app.ledger import Preload, preload_cache
from streams.app.monitor import LeanMonitor
from streams.app.record_sink import RecordSink
from streams.app.runtime import Topics, WorkerRuntime, job_pool_key
from streams.app.slow_wait import warn_if_slow
from streams.app.sweep import sweep_commands
from streams.app.sweep_watch import SweepWatch, seed
from streams.app.track import TrackHandler, TrackOutput, dead_letter_for
from streams.app.tracked import TrackedKey, table_key
from streams.app.write_behind import WriteBehind
from streams.rules.filter_keys import FULL_SESSION
from streams.rules.policy import PolicySet, policies_from_settings
from streams.summarizer import SummarizerLike, build_summarizer, validate_summarizers
from streams.summarizer.deferred_model import DeferredModel
from streams.summarizer.factory import build_model
from streams.summarizer.model import ModelResponse, SummaryModel
from streams.summarizer.model_thread import ThreadedModel
from streams.summarizer.request import ChatRequest

log = logging.getLogger(__name__)

TABLE_NAME = "track-state"
LAG_EVERY_S = 5.0
"""How often the consumer-lag gauge is refreshed."""
TRACK_BATCH = 2000
"""Most events-topic records the track agent folds per batch (a batch is what is waiting in its
:class:`~streams.app.record_sink.RecordSink`: no timer, no added latency)."""
PRELOAD_TIMEOUT_S = 60.0
"""The longest a replay reads the summaries topics into its cache (all of them together) before its jobs
run without the rest: every job waits for the preload."""
ABSORB_BATCH = 2000
"""Most summaries-topic records the absorb agent applies per batch (as ``TRACK_BATCH``)."""


@dataclass(frozen=True)
class ReplayOptions:
    """Run as a replay: own consumer group and output topics, optional session filter."""

    run_id: str
    sessions: frozenset[str] = frozenset()
    preload_from: str | None = None
    epoch: int = 0
    """The epoch the run's summaries belong to (``schemas.epochs``)."""
    excluded: frozenset[SessionKey] = frozenset()
    """Sessions the run must not summarize even if selected: on a resume, those that already adopted
    its epoch (the live worker continues their line of it with its own versions)."""


def replay_accept(specs: frozenset[str] | set[str], excluded: frozenset[SessionKey] | set[SessionKey] = frozenset()
                  ) -> Callable[[SessionKey], bool] | None:  # fmt: skip
    """The sessions a replay keeps: those ``specs`` select (all when empty) but none of ``excluded``
    (``None``: every session)."""
    selected = session_filter(specs) if specs else None
    if not excluded:
        return selected
    refused = frozenset(excluded)

    def accept(sk: SessionKey) -> bool:
        return sk not in refused and (selected is None or selected(sk))

    return accept


def session_filter(specs: frozenset[str] | set[str]) -> Callable[[SessionKey], bool]:
    """Which sessions a replay keeps: ``APP/USER/SESSION`` (exactly that key) or a bare ``SESSION``.

    A bare id matches that session id under every app and user (a session id is
    not unique across apps/users: pass the full key to pick one). A spec with
    exactly two ``/`` is read as a full key; others as a bare id.
    """
    full: set[tuple[str, str, str]] = set()
    bare: set[str] = set()
    apps: set[str] = set()
    for spec in specs:
        parts = spec.split("/")
        if len(parts) == 3 and parts[0] and parts[1:] == ["*", "*"]:
            apps.add(parts[0])  # APP/*/*: every session of the app (``distill replay --app``)
        elif len(parts) == 3 and all(parts):
            full.add((parts[0], parts[1], parts[2]))
        else:
            bare.add(spec)

    def accept(sk: SessionKey) -> bool:
        return sk.session_id in bare or sk.app_name in apps or (sk.app_name, sk.user_id, sk.session_id) in full

    return accept


def faust_data_dir(settings: Settings) -> Path:
    """Where Faust keeps its data (``worker.data_dir``, else ``services.home / "faust"``)."""
    return settings.worker.data_dir or settings.services.home / "faust"


def replay_topics(settings: Settings, run_id: str) -> Topics:
    t = settings.topics
    return Topics(t.events, f"{t.jobs}.replay-{run_id}", f"{t.summaries}.replay-{run_id}", t.dead_letters)


class TimedModel:
    """A :class:`SummaryModel` whose calls feed ``LLM_LATENCY`` (the model call only, failed ones too).

    Ledger catch-up, the delta read and prompt building are not part of it. A
    user's own ``summarizer_for`` (``--app``) is not wrapped.
    """

    def __init__(self, inner: SummaryModel) -> None:
        self.inner = inner
        self.name = inner.name
        self.context_window = inner.context_window
        self.provider_budget = inner.provider_budget

    async def complete(self, request: ChatRequest) -> ModelResponse:
        started = time.monotonic()
        try:
            return await self.inner.complete(request)
        finally:
            metrics.LLM_LATENCY.observe(time.monotonic() - started)


def _summarizers(
    settings: Settings, ext: Extensions, *, defer: bool = False
) -> tuple[Callable[[str], SummarizerLike], Callable[[], object]]:
    """``summarizer_for(app_name)`` and ``warm()`` (builds the shared model; safe in a thread).

    Every app's summarizer shares one model (one API client: its SDK import, TLS context
    and connection pool are built once, not at the first job of each app). ``defer``
    (a replay: the cache answers most jobs) builds an endpoint's client at its first call
    instead (:class:`~streams.summarizer.deferred_model.DeferredModel`).
    """
    if ext.summarizer_for is not None:
        return ext.summarizer_for, lambda: None
    built: dict[str, SummarizerLike] = {}
    shared: list[SummaryModel] = []

    def model() -> SummaryModel:
        if not shared:
            llm = settings.llm
            inner: SummaryModel = (
                DeferredModel(partial(build_model, llm), name=llm.model, context_window=llm.context_window)
                if defer and llm.configured
                else build_model(llm)
            )
            if llm.calls_in_thread:
                inner = ThreadedModel(inner)
            shared.append(TimedModel(inner))
        return shared[0]

    def summarizer_for(app_name: str) -> SummarizerLike:
        found = built.get(app_name)
        if found is None:
            found = build_summarizer(settings, app_name=app_name, hooks=ext.hooks, model=model())
            built[app_name] = found
        return found

    return summarizer_for, model


def create_app(
    settings: Settings,
    *,
    extensions: Extensions | None = None,
    replay: ReplayOptions | None = None,
) -> faust.App:
    """Build the Faust app (topics, table, agents, timers). Nothing connects until it starts.

    Raises :class:`~streams.errors.ConfigurationError` when the global summary settings or
    an ``[summary.apps.<app>]`` override is invalid (a prompt without ``{conversation_text}``,
    an unknown key...), naming the app and the rule.
    """
    ext = extensions or Extensions()
    # Every prompt and per-app override is checked first: a bad one stops the worker at startup
    # (naming the app and the rule) instead of dead-lettering each job of that app.
    validate_summarizers(settings)
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
        datadir=str(faust_data_dir(settings) / app_id),
        web_enabled=settings.worker.web_port > 0,
        web_port=max(settings.worker.web_port, 1),
        web_bind="127.0.0.1",
        # Count-based commits run inline in the fetch loop (a producer flush and a commit round trip
        # stall every partition); the interval timer commits in the background instead.
        broker_commit_every=50_000,
        broker_commit_interval=1.0,
        # Always: a replay --from-latest starts where 'distill replay' committed for its group (the
        # events' end offsets of its start); "latest" also reset the run's new jobs and summaries
        # topics, where a job written before its partition's reset was skipped for good.
        consumer_auto_offset_reset="earliest",
        stream_wait_empty=False,
        producer_max_request_size=settings.kafka.max_record_bytes + 65536,
        consumer_max_fetch_size=settings.kafka.max_record_bytes + 65536,
        producer_acks=-1,
        # Records sent one by one (summaries, sweep commands) go out in a few larger requests instead
        # of one per record (each produce request is a syscall and a broker round trip). A batch's
        # changelog records and jobs are sent at once (streams.app.batch_produce).
        producer_linger=0.005,
        producer_max_batch_size=256 * 1024,
        broker_client_id=settings.kafka.client_id,
        stream_buffer_maxsize=4096,
        # A crashed worker's partitions move on after ~10 s rather than Faust's 60 s default.
        broker_session_timeout=10.0,
        broker_heartbeat_interval=2.0,
    )
    fetch_wait = FetchWait(settings.worker.batch_fetch_wait_ms, settings.worker.event_job_budget_ms)
    batch_drain.install(app, fetch_wait=fetch_wait)
    # Faust's producer sends to topics it learned from a fetch of every topic's metadata (it forces
    # one after each topic it creates): they must stay in its metadata (projections.kafka_metadata).
    track_sent_topics()
    app.monitor = LeanMonitor(loop=app.loop, beacon=app.beacon)
    policies = ext.policies or policies_from_settings(
        settings.summary, settings.llm.model, model_context_window=settings.llm.context_window
    )
    track = TrackHandler(
        policies,
        accept=replay_accept(replay.sessions, replay.excluded) if replay else None,
        job_origin="replay" if replay else None,
        dead_letter_limit=min(64 * 1024, settings.kafka.max_record_bytes // 2),
        optimistic=False,  # decisions are a pure function of the log: a replay keeps the real queue
        digests=FirstDigests(),
    )
    summarizer_for, warm_model = _summarizers(settings, ext, defer=replay is not None)
    runtime = WorkerRuntime(settings, topics, track, summarizer_for, default_epoch=replay.epoch if replay else 0)
    # A job that fails outside its retry loop is never acked: stop, so it is delivered again.
    runtime.pool.on_error = app.crash
    # The keys the sweep can poke. Not in replay mode: a replay reads the live events topic
    # (replay_topics keeps it), so sweep commands would land in the live stream. A replay has
    # no idle time to sweep (its events are history) and is re-run rather than healed if a job is lost.
    watch = None if replay else SweepWatch(idle=settings.summary.idle_summary_after_s is not None)
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
    changelog_name = changelog.get_topic_name()
    cast(Any, table).key_serializer = KEY_CODEC
    cast(Any, table).value_serializer = STATE_CODEC

    # The events topic bypasses the conductor: its raw records reach this agent in batches
    # (streams.app.record_sink). The agent still subscribes the topic (so Faust assigns its
    # partitions and commits what is acked); its stream never carries a record.
    sink = RecordSink(app, app.conf.stream_buffer_maxsize)
    if settings.worker.jobs_give_way_ms > 0:
        runtime.give_way = IngestFirst(sink.waiting, settings.worker.jobs_give_way_ms / 1000)
        sink.on_take = runtime.give_way.taken
    batch_drain.route(app, topics.events, sink)
    max_record_bytes = settings.kafka.max_record_bytes

    async def take_fresh(sink: RecordSink, most: int) -> list[Any]:
        """The next of ``sink``'s records fetched under the current consumer generation, tracked for acks.

        A batch can straddle a rebalance: records fetched under an earlier generation belong to the
        previous assignment, and whoever owns their partition now re-reads them from the committed
        offset (Faust's stream skips them without acking too).
        """
        while True:
            messages = await sink.take(most)
            generation = app.consumer_generation_id
            fresh = [m for m in messages if m.generation_id == generation]
            if fresh:
                sink.track(fresh)
                return fresh

    async def take_batches(stream: Any, sink: RecordSink, most: int, body: Callable[[Any, list[Any]], Any],
                           what: str, acks: bool = True) -> None:  # fmt: skip
        """Run ``body`` on each batch of ``sink``'s records, for ever.

        Outputs are on the broker before a batch is acked: its records are acked only once
        ``body`` is done with them, so a commit never passes unfinished work (``acks=False``:
        ``body`` acks them itself, once its writes are on the broker).
        """
        aiter(cast(Any, stream).channel)  # what iterating the stream does first: subscribe the topic
        while True:
            fresh = await take_fresh(sink, most)
            try:
                await body(stream, fresh)
            except Exception as exc:
                # Unacked records would stall their partitions' commits for good; stopping the
                # worker re-delivers them from the committed offset (re-applying is a no-op:
                # each state keeps the highest offset it has folded).
                log.exception(f"{what} failed; stopping the worker", extra={"records": len(fresh)})
                await app.crash(exc)
                raise
            if acks:
                sink.ack(fresh)

    def enter_partition(stream: Any, batch: TableBatch, last_of: dict[int, Any], msg: Any) -> None:
        """Make ``msg``'s partition the batch's and the stream's current one.

        A RocksDB store reads a key from the db of the current event's partition: one event
        per partition and batch stands for its records (fetches alternate partitions).
        """
        batch.partition = msg.partition
        current = last_of.get(msg.partition)
        if current is None:
            current = last_of[msg.partition] = app.create_event(msg.key, None, msg.headers, msg)
        stream._set_current_event(current)

    @app.agent(events_topic, name="track", concurrency=1)
    async def track_sessions(stream: faust.StreamT[Any]) -> None:
        # Batches: one changelog record per changed key per batch (not per event).
        await take_batches(stream, sink, TRACK_BATCH, track_batch, "track batch", acks=False)

    async def track_batch(stream: Any, messages: list[Any]) -> None:
        batch = TableBatch(table_reader())
        recent = runtime.reader.recent
        outgoing: list[tuple[str, bytes, bytes | None, int]] = []
        last_of: dict[int, Any] = {}  # partition -> an event of it (its records are this partition's)
        kinds: dict[str, int] = {}
        deleted: list[tuple[SessionKey, int]] = []
        records = []
        for msg in messages:
            record = decode_event_record(msg.value or b"", max_record_bytes)  # never raises: Rejected
            records.append(record)
            # The event as decoded here is what the jobs reading this record take (no decode of their own).
            recent.add(
                msg.partition, msg.offset, msg.key, msg.value, record if isinstance(record, SessionEvent) else None
            )
        if track.digests is not None:
            await learn_event_ids(stream, batch, last_of, messages, records, track.digests)
        partition = -1
        for msg, record in zip(messages, records, strict=True):
            coords = Coordinates(msg.topic, msg.partition, msg.offset)
            key = msg.key or b""
            if msg.partition != partition:
                partition = msg.partition
                enter_partition(stream, batch, last_of, msg)
            # The log time of a command (an event is judged by its own timestamp).
            at: datetime | None = None
            if not isinstance(record, SessionEvent):
                at = datetime.fromtimestamp(msg.timestamp, UTC) if msg.timestamp else datetime.now(UTC)
            try:
                out = track.on_record(record, coords, batch, key=msg.key, log_time=at, raw=msg.value)
            except Exception as exc:  # a bug or a poison record: keep it on the dead-letter topic, go on
                log.exception("track handler failed", extra=coords.log_fields())
                raw = msg.value if isinstance(msg.value, bytes) else b""
                out = TrackOutput(
                    dead_letter=dead_letter_for(
                        raw, msg.key, coords, type(exc).__name__, str(exc)[:2000], "track", track.dead_letter_limit
                    )
                )
            kind = type(record).__name__
            kinds[kind] = kinds.get(kind, 0) + 1
            if isinstance(record, DeleteSession):
                deleted.append((record.session_key, msg.offset))
            runtime.track_logged(out, coords)
            for job in out.jobs:
                outgoing.append((topics.jobs, key, job.model_dump_json().encode(), msg.partition))
            for reply in out.replies:
                outgoing.append((topics.summaries, key, reply.model_dump_json().encode(), msg.partition))
            for adoption in out.adoptions:
                outgoing.append((topics.jobs, key, adoption.model_dump_json().encode(), msg.partition))
            if out.dead_letter is not None:
                outgoing.append((topics.dead_letters, key, out.dead_letter.model_dump_json().encode(), msg.partition))
        write_table(stream, batch, last_of, outgoing)
        if deleted:  # their jobs in progress end before their model call (judged by offsets, not the table)
            runtime.sessions_deleted(deleted)
        for kind, n in kinds.items():
            metrics.EVENTS.labels(kind).inc(n)
        # Only table writes, and no record waits for this agent (a thin stream, not a backlog, where
        # waiting for the broker lets the next batch grow): they may wait for the next batch's.
        only_rows = all(topic == changelog_name for topic, _, _, _ in outgoing)
        await writes.write(outgoing, messages, hold=only_rows and not sink.waiting())
        fetched_at = messages[0].time_in  # the oldest of the batch (its fetch stamped it)
        if fetched_at is not None:
            now = time.monotonic()
            fetch_wait.note(now - fetched_at, busy=not only_rows or len(runtime.pool) > 0, now=now)

    async def learn_event_ids(stream: Any, batch: TableBatch, last_of: dict[int, Any], messages: list[Any],
                              records: list[Any], digests: FirstDigests) -> None:  # fmt: skip
        """Before a batch is judged: the sessions whose event ids the memory must learn from the log
        (``streams.app.event_ids``), read. Each partition's first record is followed here (a jump forgets
        what the memory knew of the partition), the rest as the batch is judged."""
        unknown: list[Unknown] = []
        seen: set[tuple[int, SessionKey]] = set()
        followed: set[int] = set()
        partition = -1
        for msg, record in zip(messages, records, strict=True):
            if msg.partition != partition:
                partition = msg.partition
                enter_partition(stream, batch, last_of, msg)
                if partition not in followed:
                    followed.add(partition)
                    digests.follow(partition, msg.offset)
            if not isinstance(record, SessionEvent):
                continue
            sk = record.session_key
            if digests.knows(partition, sk) or (partition, sk) in seen:  # most records: known
                continue
            if track.accept is not None and not track.accept(sk):
                continue
            seen.add((partition, sk))
            full = batch.get(table_key(*sk, FULL_SESSION))
            start = track.unknown_before(partition, msg.offset, sk, full)
            if start is not None and full is not None:
                key = full.record_key if full.record_key is not None else sk.kafka_key()
                unknown.append(Unknown(partition, sk, start, msg.offset - 1, key))
        await learn(digests, runtime.reader, unknown, max_record_bytes)

    def table_reader() -> Any:
        """What a batch reads the table through: its store, as ``write_table`` writes it (Faust's
        ``Table.get`` adds a monitor call and a raised-and-caught ``KeyError`` per missing key)."""
        return cast(Any, table).data

    # A job reads its session's entry (in its task, the current event is its record: the partition
    # a RocksDB store reads is the session's, the jobs topic being co-partitioned with the events).
    runtime.tracked = lambda key: cast(TrackedKey | None, table_reader().get(key))

    def write_table(
        stream: Any, batch: TableBatch, last_of: dict[int, Any], outgoing: list[tuple[str, bytes, bytes | None, int]]
    ) -> None:
        """Apply the batch to the table before any await (see streams.app.batch).

        Each changed key once, straight into the store, its changelog record queued on
        ``outgoing``: what Faust's ``table[key] = value`` does, without its send buffer (one
        task switch per record). Both agents writing the table go through here, so a key's
        changelog records are produced in the order of the writes, and the sweep's index
        (``watch``) sees every write. The store takes the partition from the current event
        (RocksDB keeps a db per partition).
        """
        store = cast(Any, table).data
        for partition, writes in batch.drain().items():
            stream._set_current_event(last_of[partition])
            for tkey, value in writes:
                if value is None:
                    if store.get(tkey) is not None:
                        del store[tkey]
                    outgoing.append((changelog_name, tkey.encode(), None, partition))
                else:
                    store[tkey] = value
                    outgoing.append((changelog_name, tkey.encode(), value.to_bytes(), partition))
                if watch is not None:
                    watch.note(tkey, value)

    ordered_sender = OrderedBatchSender(lambda: cast(Any, app.producer)._ensure_producer())

    async def send_all(outgoing: list[tuple[str, bytes, bytes | None, int]]) -> None:
        """Produce the records (in order within each partition); return once the broker has every one of them.

        Raises if one could not be written: the caller then acks nothing and stops the
        worker, so its records are delivered again. (Faust flushes the producer before it
        commits, but a flush does not fail on a batch that expired: without the wait, an
        outage longer than the request timeout let offsets be committed past lost jobs and
        changelog writes.) While a batch waits, the next one queues up behind it.
        """
        if not outgoing:
            return

        # aiokafka's batch API, not a send per record; whole calls in the order of their table
        # writes (no await between ``write_table`` and here; see streams.app.batch_produce).
        # aiokafka's producer (Faust's ``_producer``, set once started) says what its sender holds back.
        fields = partial(produce_fields, outgoing, getattr(app.producer, "_producer", None))
        with warn_if_slow("produce not acknowledged by the broker", fields):
            sent = await ordered_sender.queue(outgoing, partial(_sent, cast(Any, table).data))
            await asyncio.gather(*(batch.delivered for batch in sent))

    # A low rate's small batches send their table writes together (streams.app.write_behind).
    writes = WriteBehind(
        send_all,
        sink.ack,
        settings.worker.changelog_hold_ms / 1000,
        app.crash,
        must_send=lambda: bool(app.rebalancing or not app.flow_control.is_active()),
    )
    write_behind.install(app, writes)

    def _sent(store: Any, batch: SentBatch, fut: asyncio.Future[Any]) -> None:
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            metrics.FAILURES.labels("produce", type(exc).__name__, "no").inc()
            fields = {"topic": batch.topic, "partition": batch.partition, "records": batch.records}
            log.error("produce failed", extra={**fields, "error_class": type(exc).__name__})
        elif batch.topic == changelog_name:  # where a RocksDB store's recovery resumes
            store.set_persisted_offset(TP(batch.topic, batch.partition), batch.last_offset())

    # The summaries topic too (one record at a time, each awaiting its changelog write on the
    # broker, absorbed ~120 summaries/s: a replay answered from the cache waited on that).
    summary_sink = RecordSink(app, app.conf.stream_buffer_maxsize)
    batch_drain.route(app, topics.summaries, summary_sink)

    @app.agent(summaries_topic, name="absorb", concurrency=1)
    async def absorb_summaries(stream: faust.StreamT[Any]) -> None:
        await take_batches(stream, summary_sink, ABSORB_BATCH, absorb_batch, "absorbing summaries")

    async def absorb_batch(stream: Any, messages: list[Any]) -> None:
        batch = TableBatch(table_reader())
        last_of: dict[int, Any] = {}  # partition -> an event of it (see enter_partition)
        partition = -1
        for msg in messages:
            if msg.partition != partition:
                partition = msg.partition
                enter_partition(stream, batch, last_of, msg)
            try:
                record = decode_summary_record(msg.value or b"")
            except ValueError as exc:  # not a distill record: nothing to apply (its key's job times out)
                log.error("undecodable summaries record skipped",
                          extra={**Coordinates(msg.topic, msg.partition, msg.offset).log_fields(),
                                 "error_class": type(exc).__name__})  # fmt: skip
                continue
            track.on_summary_record(record, batch, msg.offset)
        outgoing: list[tuple[str, bytes, bytes | None, int]] = []
        write_table(stream, batch, last_of, outgoing)
        await writes.write(outgoing, hold=False)  # after the held table writes (their order on the changelog)

    revoked_generation: list[int | None] = [None]  # see current_job; set by _revoked

    @app.agent(jobs_topic, name="summarize", concurrency=1)
    async def summarize_jobs(stream: faust.StreamT[Any]) -> None:
        async for event in cast(Any, stream).noack().events():
            msg = event.message
            coords = Coordinates(msg.topic, msg.partition, msg.offset)
            job = event.value
            produced = msg.timestamp if msg.timestamp else None
            if job is None:  # a tombstone: Faust calls no codec for it
                job = decode_job_record(None)
            pool_key: Hashable
            if isinstance(job, Rejected):  # no job: dead-lettered, acked in its partition's order
                run = partial(runtime.reject_job, job, coords, msg.key)
                pool_key = ("rejected", msg.partition, msg.offset)
            elif isinstance(job, AdoptEpoch):  # an epoch switch: ordered with the full session's jobs
                run = partial(runtime.run_adoption, job, coords, msg.key or b"")
                pool_key = table_key(job.app_name, job.user_id, job.session_id, "")
            else:
                run = partial(runtime.run_job, job, coords, msg.key or b"", produced)
                pool_key = job_pool_key(job)
            await runtime.pool.submit(
                pool_key, msg.partition, msg.offset, run, event.ack,
                # A job of a revoked consumer generation is re-delivered from the committed offset.
                valid=partial(current_job, app, msg, revoked_generation),
            )  # fmt: skip

    @cast(Any, app.on_partitions_revoked).connect  # type: ignore[untyped-decorator]  # mode signals: loose types
    async def _revoked(app_: Any, *args: Any, signal: Any = None, **_: Any) -> None:
        revoked: set[Any] = args[0] if args else _.get("revoked", set())
        revoked_generation[0] = app.consumer_generation_id
        gone = sorted(tp.partition for tp in revoked if tp.topic == topics.jobs)
        log.info("partitions revoked", extra={"topic": topics.jobs, "partitions": ",".join(map(str, gone)),
                                               "generation": app.consumer_generation_id})  # fmt: skip
        runtime.reader.recent.reset({tp.partition for tp in revoked if tp.topic == topics.events})
        if watch is not None:  # the table is co-partitioned with the events topic
            watch.drop_partitions({tp.partition for tp in revoked if tp.topic == topics.events})
        await runtime.on_revoked({tp.partition for tp in revoked if tp.topic == topics.jobs})

    @cast(Any, app.on_partitions_assigned).connect  # type: ignore[untyped-decorator]
    async def _assigned(app_: Any, *args: Any, signal: Any = None, **_: Any) -> None:
        assigned: set[Any] = args[0] if args else _.get("assigned", set())
        runtime.reader.recent.reset({tp.partition for tp in assigned if tp.topic == topics.events})
        if watch is not None:  # states recovered from the changelog: the next sweep scans the table
            watch.needs_scan = True
        mine = sorted(tp.partition for tp in assigned if tp.topic == topics.jobs)
        # A member rejoining a stable group may keep its generation number: its jobs are current.
        revoked_generation[0] = None
        runtime.on_assigned(set(mine))
        log.info("partitions assigned", extra={"topic": topics.jobs, "partitions": ",".join(map(str, mine)),
                                                "generation": app.consumer_generation_id})  # fmt: skip

    @cast(Any, app.on_before_shutdown).connect  # type: ignore[untyped-decorator]
    async def _shutdown(app_: Any, *args: Any, signal: Any = None, **_: Any) -> None:
        await runtime.stop()

    if replay and replay.preload_from:
        preload_topic = replay.preload_from

        @app.task  # type: ignore[untyped-decorator]  # faust's decorators are untyped
        async def _preload() -> None:
            try:
                await preload_summaries(settings, preload_topic, topics.summaries, runtime.cache)
            finally:
                runtime.cache_ready.set()

    if watch is not None:  # not in replay mode (see ``watch``)
        _register_sweep(app, table, watch, settings, topics, policies)

    lag_topics = {topics.events, topics.jobs, topics.summaries}

    @app.timer(LAG_EVERY_S)  # type: ignore[untyped-decorator]  # faust's decorators are untyped
    async def _consumer_lag() -> None:
        metrics.set_consumer_lag(consumer_lag(app.consumer, lag_topics))

    @app.task  # type: ignore[untyped-decorator]  # faust's decorators are untyped
    async def _warm_summarizer() -> None:
        # The openai SDK takes about a second of CPU to import and its client tens of ms to
        # build: in a thread at startup, not on the event loop at the first job (where it
        # stalls every agent).
        await asyncio.to_thread(warm_model)

    app.distill_runtime = runtime  # type: ignore[attr-defined]
    return app


def _register_sweep(
    app: faust.App, table: Any, watch: SweepWatch, settings: Settings, topics: Topics, policies: PolicySet
) -> None:
    """The ``_sweep`` timer: idle sweep and timed-out job re-emission, commands to the events topic.

    It looks at ``watch`` (the keys it can poke, noted at every table write), not at the
    whole table. After an assignment it first scans the table once, in chunks, to note
    the states recovered from the changelog (a job in flight before a restart is what the
    re-emission is for); only once recovery is over, again if a rebalance interrupts it.
    """
    idle_after = settings.summary.idle_summary_after_s
    sweep_every = max(1.0, min(idle_after or 60.0, settings.summary.job_timeout_s) / 4)

    @app.timer(sweep_every)  # type: ignore[untyped-decorator]  # faust's decorators are untyped
    async def _sweep() -> None:
        if watch.needs_scan and _recovered(app):
            await _seed_watch(app, table, watch)
        now = datetime.now(UTC)
        commands = sweep_commands(
            watch.entries(),
            now=now,
            idle_after_s=idle_after,
            job_timeout_s=settings.summary.job_timeout_s,
            policies=policies,
        )
        for partition, key, command in commands:
            await app.producer.send(
                topics.events,
                key,
                command.model_dump_json().encode(),
                partition,
                None,
                None,
            )


def current_job(app: Any, message: Any, revoked: list[int | None]) -> bool:
    """``message`` was fetched under the current consumer generation, and it is not being revoked.

    ``revoked[0]`` is the generation whose partitions were last revoked: from the revoke
    until the next assignment the generation number does not change yet, but the jobs of
    the revoked assignment must not start (another worker may own their partition next).
    """
    generation = message.generation_id
    return bool(generation == app.consumer_generation_id and generation != revoked[0])


def _recovered(app: Any) -> bool:
    """Table recovery of the current assignment is over (rebalancing: from revoke to recovery end)."""
    return bool(app.tables.recovery.completed.is_set() and not app.rebalancing and not app.in_recovery)


async def _seed_watch(app: Any, table: Any, watch: SweepWatch) -> None:
    rebalance = app.rebalancing_count
    started = time.perf_counter()
    keys = list(table.keys())  # keys only: a RocksDB store decodes no value here

    def interrupted() -> bool:
        return bool(app.rebalancing or app.rebalancing_count != rebalance)

    if await seed(watch, keys, table.get, interrupted=interrupted):
        watch.needs_scan = False
        seconds = round(time.perf_counter() - started, 3)
        log.info("sweep index seeded", extra={"keys": len(keys), "watched": len(watch), "seconds": seconds})


def consumer_lag(consumer: Any, topics: set[str]) -> list[tuple[str, int, int]]:
    """``(topic, partition, log end - committed offset)`` of the assigned partitions of ``topics``.

    Before the first commit of a partition, the offset after the last record read stands in.
    """
    rows: list[tuple[str, int, int]] = []
    for tp in consumer.assignment():
        if tp.topic not in topics:
            continue
        try:
            high = consumer.highwater(tp)
        except Exception:  # not fetched yet / being revoked
            continue
        done = consumer._committed_offset.get(tp)
        if done is None:
            read = consumer._read_offset.get(tp)
            done = read + 1 if read is not None else None
        if high is not None and done is not None:
            rows.append((tp.topic, tp.partition, max(0, high - done)))
    return rows


async def summary_topics(settings: Settings, live: str, *, exclude: str) -> list[str]:
    """The live summaries topic (first, if it exists) and the outputs of earlier replays (the cache's sources)."""
    from aiokafka.admin import AIOKafkaAdminClient

    from streams.clients.kafka_config import common_kwargs

    admin = AIOKafkaAdminClient(**common_kwargs(settings.kafka))
    await admin.start()
    try:
        names = await admin.list_topics()
    finally:
        await admin.close()
    replays = sorted(n for n in names if n.startswith(f"{live}.replay-") and n != exclude)
    return ([live] if live in names and live != exclude else []) + replays


async def preload_summaries(
    settings: Settings, live: str, exclude: str, cache: SummaryCache, timeout_s: float = PRELOAD_TIMEOUT_S
) -> Preload:
    """Fill a replay's ``cache`` from the live summaries topic and earlier replays' (not ``exclude``, its own),
    within ``timeout_s`` in all (listing the topics included); logs what it read and what it gave up on.

    Bounded: every job of the replay waits for it, and a topic whose partitions have no leader yet
    (another replay's, just created) or a slow broker must not hold the run. The cache only spares
    model calls: what it lacks is summarized again.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    log.info("summary cache preload started", extra={"topic": live, "timeout_s": timeout_s})
    try:
        async with asyncio.timeout_at(deadline):
            names = await summary_topics(settings, live, exclude=exclude)
    except (TimeoutError, KafkaError) as exc:
        report = Preload([live], given_up={f"{live}[*]": f"topics not listed: {type(exc).__name__}"})
    else:
        report = await preload_cache(settings.kafka, names, cache, timeout_s=max(0.0, deadline - loop.time()))
    report.seconds = round(timeout_s - max(0.0, deadline - loop.time()), 3)
    if report.given_up:
        log.warning(
            "summary cache preload gave up on partitions: their summaries are made again",
            extra={"partitions": ", ".join(f"{k}: {v}" for k, v in sorted(report.given_up.items()))[:2000],
                   "count": len(report.given_up)},
        )  # fmt: skip
    log.info(
        "summary cache preloaded",
        extra={"topics": ",".join(report.topics), "entries": report.entries, "seconds": report.seconds,
               "given_up": len(report.given_up)},
    )  # fmt: skip
    return report
