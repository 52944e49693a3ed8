"""A replay in one process, without Kafka: the track and summarize use cases over a list of records.

Decisions are a pure function of the event log (``streams.rules.trigger_state``),
so the jobs a replay makes are known from the events alone, and the summaries
from the jobs and the content-addressed cache. This runs both use cases in
order, each job answered at once, exactly as the worker's handlers do:

* ``distill replay --dry-run`` counts the keys, the jobs (boundaries) and how
  many of them the cache answers, never calling the model (a key's first miss
  makes every later job of that key a miss: its previous summary would change);
* ``benchmarks/bench_replay.py`` measures replay throughput.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from schemas import SessionEvent, SessionKey, SessionSummary, SummaryFailure, SummaryJob
from schemas.event_ids import FirstDigests
from streams.app.cache import SummaryCache
from streams.app.coordinates import Coordinates
from streams.app.decoding import decode_event_record
from streams.app.event_log import RawEvent, raw_event
from streams.app.gc_tuning import tuned_gc
from streams.app.heads import Head, head_of
from streams.app.ledger import summary_key
from streams.app.summarize import SummarizeHandler
from streams.app.track import TrackHandler
from streams.app.tracked import TrackedKey
from streams.rules.policy import PolicySet
from streams.summarizer import SummarizerLike, SummaryResult

_new_tuple = tuple.__new__

SETTLE_EVERY = 10_000
"""Records between two freezes of what the replay built (``tuned_gc``): a middle-generation
collection (every 200,000 allocations) then finds little to scan."""


class WouldCallModel(Exception):
    """A dry run reached a job the cache does not answer."""


@dataclass
class ReplayStats:
    """What a replay did (or, dry, would do)."""

    events: int = 0
    jobs: int = 0
    summaries: int = 0
    cache_hits: int = 0
    llm_calls: int = 0
    """Jobs the model answered (dry run: jobs it would have to answer)."""
    skipped: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    """CPU time of the process meanwhile (a loaded host inflates ``seconds``, not this)."""
    boundaries: dict[str, list[str | None]] = field(default_factory=dict)
    texts: dict[str, list[str]] = field(default_factory=dict)

    @property
    def keys(self) -> int:
        return len(self.boundaries)

    @property
    def events_per_s(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0

    @property
    def events_per_cpu_s(self) -> float:
        return self.events / self.cpu_seconds if self.cpu_seconds > 0 else 0.0


class _Ledger:
    def __init__(self, epoch: int = 0) -> None:
        self.heads: dict[str, Head] = {}
        self.epoch = epoch

    async def ready(self, partition: int) -> None:
        return None

    def head(self, partition: int, key: str) -> Head | None:
        return self.heads.get(key)

    def epoch_of(self, partition: int, session: str) -> int:
        return self.epoch

    def failure(self, partition: int, key: str) -> SummaryFailure | None:
        return None  # a job that fails here raises: the replay stops, no request waits for it


class _Log:
    """The records of each partition, by record key, in offset order."""

    def __init__(self) -> None:
        self.by_key: dict[tuple[int, bytes], tuple[list[int], list[RawEvent]]] = {}

    def add(self, partition: int, key: bytes, offset: int, value: bytes) -> None:
        found = self.by_key.get((partition, key))
        if found is None:
            found = self.by_key[(partition, key)] = ([], [])
        offsets, records = found
        offsets.append(offset)
        records.append(raw_event(offset, value))

    async def read(self, partition: int, start: int, end: int, key: bytes) -> list[RawEvent]:
        found = self.by_key.get((partition, key))
        if found is None:
            return []
        offsets, records = found
        return records[bisect.bisect_left(offsets, start) : bisect.bisect_right(offsets, end)]


class _CacheOnly:
    """A summarizer that answers nothing: its address is the real one's, its call raises."""

    def __init__(self, inner: SummarizerLike) -> None:
        self.inner = inner
        cache_key = getattr(inner, "cache_key", None)
        if callable(cache_key):
            self.cache_key = cache_key

    async def summarize(self, *args: Any, **kwargs: Any) -> SummaryResult:
        raise WouldCallModel

    def metadata(self) -> dict[str, Any]:
        return self.inner.metadata()


class _Summarize(SummarizeHandler):
    """The summarize handler reading the events the track side already parsed (by offset)."""

    parsed: dict[tuple[int, int], SessionEvent]
    partition: int = 0

    def _event(self, item: RawEvent) -> SessionEvent | None:
        return self.parsed.get((self.partition, item.offset))


class InProcessReplay:
    """Replays records through :class:`TrackHandler` and :class:`SummarizeHandler` (see the module)."""

    def __init__(
        self,
        policies: PolicySet,
        summarizer_for: Callable[[str], SummarizerLike],
        cache: SummaryCache | None = None,
        *,
        dry_run: bool = False,
        accept: Callable[[SessionKey], bool] | None = None,
        max_record_bytes: int = 8 * 1024 * 1024,
    ) -> None:
        self.dry_run = dry_run
        self.max_record_bytes = max_record_bytes
        self.cache = cache if cache is not None else SummaryCache()
        wrapped: dict[str, SummarizerLike] = {}

        def pick(app: str) -> SummarizerLike:
            if not dry_run:
                return summarizer_for(app)
            if app not in wrapped:
                wrapped[app] = _CacheOnly(summarizer_for(app))
            return wrapped[app]

        self.ledger = _Ledger()
        self.log = _Log()
        # The whole log is judged in order: the memory of event ids never has to learn a session.
        digests = FirstDigests(capacity=1 << 62)
        self.track = TrackHandler(policies, accept=accept, job_origin="replay", digests=digests)
        self.summarize = _Summarize(self.ledger, self.log, pick, self.cache, digests=digests)
        self.summarize.parsed = {}
        self.store: dict[str, TrackedKey] = {}
        self.poisoned: set[str] = set()
        self.stats = ReplayStats()

    async def run(self, records: Iterable[tuple[int, int, bytes, bytes]], topic: str = "events") -> ReplayStats:
        """Replay ``(partition, offset, record key, value)`` records in log order."""
        with tuned_gc() as settle:
            return await self._run(records, topic, settle)

    async def _run(
        self, records: Iterable[tuple[int, int, bytes, bytes]], topic: str, settle: Callable[[], None]
    ) -> ReplayStats:
        started, cpu = time.perf_counter(), time.process_time()
        stats = self.stats
        add, on_record, parsed = self.log.add, self.track.on_record, self.summarize.parsed
        store, max_bytes = self.store, self.max_record_bytes
        for n, (partition, offset, key, value) in enumerate(records, 1):
            if not n % SETTLE_EVERY:
                settle()  # what the replay built so far is kept to its end: out of the collector's scans
            add(partition, key, offset, value)
            record = decode_event_record(value, max_bytes)
            # ``Coordinates(...)`` without the named tuple's Python-level ``__new__`` (per record).
            out = on_record(record, _new_tuple(Coordinates, (topic, partition, offset)), store, key=key, raw=value)
            if isinstance(record, SessionEvent):
                stats.events += 1
                parsed[(partition, offset)] = record
            for job in out.jobs:
                await self._job(job, partition)
        stats.seconds += time.perf_counter() - started
        stats.cpu_seconds += time.process_time() - cpu
        return stats

    async def _job(self, job: SummaryJob, partition: int) -> None:
        stats = self.stats
        key = job.session_key.kafka_key().decode(errors="replace") + "\x1f" + job.filter_key
        if job.origin == "join":  # a sync request waiting for the key's jobs: no boundary, nothing to run
            return
        if job.origin != "retry":
            stats.jobs += 1
            stats.boundaries.setdefault(key, [])
        if key in self.poisoned:
            stats.llm_calls += 1
            return
        self.summarize.partition = partition
        try:
            result = await self.summarize.handle(job, partition)
        except WouldCallModel:
            self.poisoned.add(key)
            stats.llm_calls += 1
            return
        record = result.record
        if result.outcome == "cached":
            stats.cache_hits += 1
        elif result.outcome == "summary":
            stats.llm_calls += 1
        elif result.outcome == "skipped":
            stats.skipped += 1
        if isinstance(record, SessionSummary):
            stats.summaries += 1
            self.ledger.heads[summary_key(record)] = head_of(record, result.events_offset)
            if result.input_hash and result.outcome == "summary":
                self.cache.put(result.input_hash, record)
            stats.boundaries[key].append(record.boundary.last_event_id)
            stats.texts.setdefault(key, []).append(record.summary)
        if record is not None:
            self.track.on_summary_record(record, self.store)


def records_of(events: Sequence[SessionEvent], partitions: int = 1) -> list[tuple[int, int, bytes, bytes]]:
    """``events`` as events-topic records (canonical keys, partitioned by key hash, offsets per partition)."""
    out: list[tuple[int, int, bytes, bytes]] = []
    next_offset: dict[int, int] = {}
    for event in events:
        key = event.session_key.kafka_key()
        partition = sum(key) % partitions
        offset = next_offset.get(partition, 0)
        next_offset[partition] = offset + 1
        out.append((partition, offset, key, event.model_dump_json().encode()))
    return out


__all__ = ["InProcessReplay", "ReplayStats", "WouldCallModel", "records_of"]
