"""The worker's dependencies and the I/O around the handlers (opened at startup, never at import)."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from aiokafka.errors import KafkaError

from schemas import DeadLetter, SessionSummary, SummaryFailure, SummaryJob
from schemas.settings import Settings
from streams import metrics
from streams.app.cache import SummaryCache
from streams.app.coordinates import Coordinates
from streams.app.event_log import EventLogReader
from streams.app.headers import summary_headers
from streams.app.ledger import SummaryLedger
from streams.app.pool import JobPool
from streams.app.summarize import JobResult, SummarizeHandler, is_permanent
from streams.app.track import TrackHandler, TrackOutput, dead_letter_for
from streams.app.tracked import table_key
from streams.errors import RetryableError
from streams.summarizer import SummarizerLike

log = logging.getLogger(__name__)

Send = Callable[[str, bytes, bytes, int, list[tuple[str, bytes]] | None], Awaitable[Any]]
"""``send(topic, key, value, partition, headers)``: awaits the broker's ack."""


class Buffered(Protocol):
    def __call__(self, topic: str, key: bytes, value: bytes, partition: int) -> Awaitable[Any]: ...


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with jitter, honouring a server's ``retry_after``."""

    initial_s: float = 0.5
    maximum_s: float = 30.0
    factor: float = 2.0

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        base = min(self.maximum_s, self.initial_s * self.factor**attempt)
        delay = base * (0.5 + random.random() / 2)
        return max(delay, retry_after or 0.0)


@dataclass
class Topics:
    events: str
    jobs: str
    summaries: str
    dead_letters: str


@dataclass
class WorkerRuntime:
    """Handlers plus the clients they need; see :mod:`streams.app.factory`."""

    settings: Settings
    topics: Topics
    track: TrackHandler
    summarizer_for: Callable[[str], SummarizerLike]
    cache: SummaryCache = field(default_factory=SummaryCache)
    backoff: Backoff = field(default_factory=Backoff)
    max_unexpected_attempts: int = 3
    send: Send | None = None
    ledger: SummaryLedger = field(init=False)
    reader: EventLogReader = field(init=False)
    summarize: SummarizeHandler = field(init=False)
    pool: JobPool = field(init=False)
    cache_ready: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        n = self.settings.summary.async_summary_num
        self.ledger = SummaryLedger(self.settings.kafka, self.topics.summaries, self.cache)
        self.reader = EventLogReader(self.settings.kafka, self.topics.events, size=n)
        self.summarize = SummarizeHandler(self.ledger, self.reader, self.summarizer_for, self.cache)
        self.pool = JobPool(n, on_size=metrics.JOBS_IN_FLIGHT.set)

    async def stop(self) -> None:
        await self.pool.drain(None, timeout=5.0)
        await self.ledger.stop()
        await self.reader.stop()

    async def on_revoked(self, partitions: set[int]) -> None:
        """Jobs partitions revoked: drain their jobs (no job of theirs runs once this returns).

        The caller's ``valid`` already refuses the revoked assignment's jobs (see ``JobPool``).
        """
        await self.pool.drain(partitions)
        self.ledger.forget(partitions)

    def on_assigned(self, partitions: set[int]) -> None:
        """Jobs partitions assigned: their summaries tails are read again before their next job."""
        self.ledger.forget(partitions)

    # -- track side ------------------------------------------------------------------------
    def track_logged(self, out: TrackOutput, coords: Coordinates) -> None:
        if out.dead_letter is not None:
            dl = out.dead_letter
            metrics.DEAD_LETTERS.labels("track", dl.error_class).inc()
            log.warning("record dead-lettered", extra={**coords.log_fields(), "error_class": dl.error_class,
                                                         "reason": dl.reason[:300]})  # fmt: skip
        for job in out.jobs:
            metrics.JOBS_EMITTED.labels(job.origin).inc()
            log.info(
                "summary job emitted",
                extra={**coords.log_fields(), "session_id": job.session_id, "filter_key": job.filter_key,
                       "job_id": job.job_id, "from_version": job.from_version, "trigger": job.trigger.name,
                       "origin": job.origin},
            )  # fmt: skip

    # -- summarize side --------------------------------------------------------------------
    async def run_job(self, job: SummaryJob, coords: Coordinates, key: bytes, produced_at: float | None) -> None:
        """Run one job to completion: retried with backoff on transient failures, never dropped."""
        fields = {**coords.log_fields(), "session_id": job.session_id, "filter_key": job.filter_key,
                  "job_id": job.job_id}  # fmt: skip
        attempt = unexpected = 0
        given_up: Exception | None = None
        await self.cache_ready.wait()
        while True:
            try:
                result = await self.summarize.handle(job, coords.partition)
                await self._publish(result, coords.partition, key)
                break
            except asyncio.CancelledError:
                raise
            except (RetryableError, KafkaError) as exc:
                await self._back_off(exc, attempt, "summary job failed, retrying", fields)
                attempt += 1
            except Exception as exc:
                unexpected += 1
                permanent = is_permanent(exc) or unexpected >= self.max_unexpected_attempts
                metrics.FAILURES.labels("summarize", type(exc).__name__, "no" if permanent else "yes").inc()
                log.error("summary job failed", exc_info=not is_permanent(exc),
                          extra={**fields, "error_class": type(exc).__name__, "permanent": permanent})  # fmt: skip
                if not permanent:
                    await asyncio.sleep(self.backoff.delay(unexpected))
                    continue
                given_up = exc
                break
        if given_up is not None:
            await self._give_up(job, given_up, coords, key, fields)
        if produced_at is not None:
            metrics.JOB_AGE.observe(max(0.0, time.time() - produced_at))

    async def _publish(self, result: JobResult, partition: int, key: bytes) -> None:
        metrics.JOBS_DONE.labels(result.outcome).inc()
        record = result.record
        if record is None:
            return
        assert self.send is not None
        headers = summary_headers(result.events_offset, result.input_hash) if isinstance(record, SessionSummary) else []
        await self.send(self.topics.summaries, key, record.model_dump_json().encode(), partition, headers)
        if isinstance(record, SessionSummary):
            self.ledger.record(partition, record, result.events_offset)
            if result.input_hash:
                self.cache.put(result.input_hash, record)
            if result.outcome == "cached":
                metrics.CACHE_HITS.inc()
            metrics.TOKENS.labels("in").inc(record.stats.input_tokens)
            metrics.TOKENS.labels("out").inc(record.stats.output_tokens)
            log.info(
                "summary published",
                extra={"topic": self.topics.summaries, "partition": partition, "session_id": record.session_id,
                       "filter_key": record.filter_key, "version": record.version, "job_id": record.job_id,
                       "model": record.model, "prompt_version": record.prompt_version, "outcome": result.outcome,
                       "events": result.events},
            )  # fmt: skip

    async def _give_up(
        self, job: SummaryJob, exc: BaseException, coords: Coordinates, key: bytes, fields: dict[str, Any]
    ) -> None:
        """Answer the job with a failure and dead-letter it; each send retried like a transient failure."""
        failure: SummaryFailure = self.summarize.failure(job, exc)
        dl: DeadLetter = dead_letter_for(
            job.model_dump_json().encode(), key, coords, type(exc).__name__, str(exc)[:2000], "summarize"
        )
        await self._send_retrying(self.topics.summaries, key, failure.model_dump_json().encode(), coords, fields)
        await self._send_retrying(self.topics.dead_letters, key, dl.model_dump_json().encode(), coords, fields)
        metrics.DEAD_LETTERS.labels("summarize", type(exc).__name__).inc()

    async def _send_retrying(
        self, topic: str, key: bytes, value: bytes, coords: Coordinates, fields: dict[str, Any]
    ) -> None:
        """``send`` to the job's partition of ``topic``, retried with backoff while Kafka fails (never dropped)."""
        assert self.send is not None
        attempt = 0
        while True:
            try:
                await self.send(topic, key, value, coords.partition, [])
                return
            except (RetryableError, KafkaError) as exc:
                await self._back_off(exc, attempt, "summary job failure send failed, retrying",
                                     {**fields, "to_topic": topic})  # fmt: skip
                attempt += 1

    async def _back_off(self, exc: RetryableError | KafkaError, attempt: int, message: str,
                        fields: dict[str, Any]) -> None:  # fmt: skip
        """A transient failure of a job's ``attempt`` (0-based): count it, log it, sleep the backoff."""
        retry_after = exc.retry_after if isinstance(exc, RetryableError) else None
        delay = self.backoff.delay(attempt, retry_after)
        metrics.FAILURES.labels("summarize", type(exc).__name__, "yes").inc()
        log.warning(message, extra={**fields, "attempt": attempt + 1, "error_class": type(exc).__name__,
                                    "retry_in_s": round(delay, 3)})  # fmt: skip
        await asyncio.sleep(delay)


def job_pool_key(job: SummaryJob) -> str:
    return table_key(job.app_name, job.user_id, job.session_id, job.filter_key)


def now_utc() -> datetime:
    return datetime.now(UTC)
