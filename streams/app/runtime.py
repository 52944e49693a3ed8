"""The worker's dependencies and the I/O around the handlers (opened at startup, never at import)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any, Literal, Protocol

from aiokafka.errors import KafkaError

from schemas import (
    AdoptEpoch,
    CallReport,
    DeadLetter,
    EpochAdopted,
    SessionKey,
    SessionSummary,
    SummaryFailure,
    SummaryJob,
    SummaryReply,
    SummaryReport,
)
from schemas.settings import Settings
from schemas.summaries import count_model_calls
from streams import metrics
from streams.app.cache import SummaryCache
from streams.app.coordinates import Coordinates
from streams.app.decoding import Rejected
from streams.app.epochs import decide_adoption
from streams.app.event_log import EventLogReader
from streams.app.headers import summary_headers
from streams.app.heads import session_id_of
from streams.app.ingest_first import IngestFirst
from streams.app.ledger import SummaryLedger, summary_key
from streams.app.pool import JobPool
from streams.app.summarize import JobResult, SummarizeHandler, decided_before, deleted_since, is_permanent
from streams.app.track import TrackHandler, TrackOutput, dead_letter_for
from streams.app.tracked import KEY_SEPARATOR, TrackedKey, table_key
from streams.errors import PermanentError, RetryableError
from streams.rules.filter_keys import FULL_SESSION
from streams.summarizer import SummarizerLike
from streams.summarizer.model import ContextLengthError
from streams.summarizer.report import report_of

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


Published = Literal["published", "switched", "deleted"]
"""How a job's publish ended: done, not published because the session switched epochs (run it
again), or not published because the session was deleted after the job was decided."""

JOBS_PER_MODEL_SLOT = 8
"""Jobs a worker runs at once per model-call slot (``async_summary_num`` slots)."""


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
    default_epoch: int = 0
    """The epoch of summaries of sessions that never switched (a replay: its own, ``schemas.epochs``)."""
    ledger: SummaryLedger = field(init=False)
    reader: EventLogReader = field(init=False)
    summarize: SummarizeHandler = field(init=False)
    pool: JobPool = field(init=False)
    cache_ready: asyncio.Event = field(default_factory=asyncio.Event)
    give_way: IngestFirst | None = None
    """Between its steps a job gives way to events waiting for the track agent (``None``: never)."""
    tracked: Callable[[str], TrackedKey | None] | None = None
    """Reads the track table (``None``: not wired): before its model call and its publish a job checks
    that its session was not deleted since it was decided (:func:`~streams.app.summarize.deleted_since`),
    and an epoch switch compares the epoch's chains with the session's first record
    (:func:`~streams.app.epochs.missing_history`)."""
    _runs: dict[str, set[_Run]] = field(default_factory=dict, init=False, repr=False)
    """Session → its jobs running now (a deletion of the session cancels their attempts)."""
    _head_locks: dict[str, list[Any]] = field(default_factory=dict, init=False, repr=False)
    _given_up: dict[str, float] = field(default_factory=dict, init=False, repr=False)
    """Key → loop time its last job was given up (re-emissions of it are not run again)."""

    def __post_init__(self) -> None:
        n = self.settings.summary.async_summary_num
        self.ledger = SummaryLedger(self.settings.kafka, self.topics.summaries, self.cache,
                                    default_epoch=self.default_epoch)  # fmt: skip
        self.reader = EventLogReader(self.settings.kafka, self.topics.events, size=n,
                                     recent_bytes=self.settings.worker.recent_events_mb * 1024 * 1024)  # fmt: skip
        self.summarize = SummarizeHandler(self.ledger, self.reader, self.summarizer_for, self.cache,
                                          max_record_bytes=self.settings.kafka.max_record_bytes,
                                          digests=self.track.digests)  # fmt: skip
        # ``async_summary_num`` bounds the model calls, not the jobs: a job the cache answers (a
        # replay's, mostly) is CPU work and would otherwise queue behind the model's latency.
        self.model_slots = asyncio.Semaphore(n)
        self.pool = JobPool(n * JOBS_PER_MODEL_SLOT, on_size=metrics.JOBS_IN_FLIGHT.set)

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
        """Run one job to an end: a summary, nothing (stale), or a failure record and a dead letter.

        The bounded failure policy: transient failures are retried with backoff while the
        job's ``job_timeout_s`` (from its start; a wait for a model slot does not count) and
        ``job_max_attempts`` last; an attempt still running at the timeout is cancelled, so its
        late result is never published; a permanent error ends the job at once, except a
        context-length refusal naming a smaller window, which is tried once more budgeted with
        that window. A job given up
        publishes a ``SummaryFailure`` (``gave_up``, the calls' report, the learned window)
        and a dead letter; the boundary stays where it was. A job whose session was deleted
        after it was decided is abandoned (``_abandon``): its events reach no model from the
        moment the deletion is in the track table, and no summary of them is published.
        """
        fields = {**coords.log_fields(), "session_id": job.session_id, "filter_key": job.filter_key,
                  "job_id": job.job_id}  # fmt: skip
        if self.track.accept is not None and not self.track.accept(job.session_key):
            # A replay's job of a session it no longer summarizes (a resume excludes those that
            # adopted its epoch: their line is the live worker's now). Nobody waits for it.
            log.info("summary job skipped: session not replayed", extra=fields)
            metrics.JOBS_DONE.labels("skipped").inc()
            return
        await self.cache_ready.wait()
        policy = self.track.policies.for_app(job.app_name)
        loop = asyncio.get_running_loop()
        if job.origin == "retry" and self._recently_given_up(job, policy.job_timeout_s, loop.time()):
            # A re-emission of a job this worker has just given up: answered (released), not re-run.
            superseded = self.summarize.failure(job, JobSupersededError(
                f"job {job.job_id} re-emitted while its key's job was being given up: not run again"))  # fmt: skip
            await self._send_retrying(self.topics.summaries, key, superseded.model_dump_json().encode(), coords, fields)
            metrics.JOBS_DONE.labels("stale").inc()
            return
        run = _Run(job, deadline=loop.time() + policy.job_timeout_s)
        session = session_id_of(*job.session_key)
        self._runs.setdefault(session, set()).add(run)
        try:
            await self._attempts(run, coords, key, fields)
        finally:
            runs = self._runs.get(session)
            if runs is not None:
                runs.discard(run)
                if not runs:
                    del self._runs[session]
        if produced_at is not None:
            metrics.JOB_AGE.observe(max(0.0, time.time() - produced_at))

    async def _attempts(self, run: _Run, coords: Coordinates, key: bytes, fields: dict[str, Any]) -> None:
        """``run_job``'s attempts, until the job is published, given up or abandoned (its session deleted)."""
        job = run.job
        policy = self.track.policies.for_app(job.app_name)
        loop = asyncio.get_running_loop()
        while True:
            await self._turn()
            if run.deleted or self.session_deleted(run.job):
                await self._abandon(run, coords, key, fields)
                break
            try:
                async with asyncio.timeout_at(run.deadline) as timer:
                    result = await self._attempt(run, coords.partition, timer)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if run.deleted and task is not None and not task.cancelling():
                    # Only the attempt was cancelled (``sessions_deleted``): the job ends here.
                    await self._abandon(run, coords, key, fields)
                    break
                raise
            except SessionDeletedError:
                await self._abandon(run, coords, key, fields)
                break
            except TimeoutError as exc:
                run.note(exc)
                run.attempts += 1
                metrics.FAILURES.labels("summarize", "JobTimeoutError", "no").inc()
                timeout = JobTimeoutError(
                    f"job {job.job_id} ran past job_timeout_s={policy.job_timeout_s:g} "
                    f"(attempt {run.attempts}): the call in progress was cancelled"
                )
                await self._give_up(run, timeout, coords, key, fields, retryable=True)
                break
            except (RetryableError, KafkaError) as exc:
                run.note(exc)
                run.attempts += 1
                retry_after = exc.retry_after if isinstance(exc, RetryableError) else None
                delay = self.backoff.delay(run.attempts - 1, retry_after)
                if run.attempts >= policy.job_max_attempts or loop.time() + delay >= run.deadline:
                    metrics.FAILURES.labels("summarize", type(exc).__name__, "no").inc()
                    await self._give_up(run, exc, coords, key, fields, retryable=True)
                    break
                await self._back_off(exc, run.attempts - 1, "summary job failed, retrying", fields, delay)
                continue
            except Exception as exc:
                run.note(exc)
                run.attempts += 1
                window = learned_window(exc)
                if window is not None and run.retry_with_window(window):
                    metrics.FAILURES.labels("summarize", type(exc).__name__, "yes").inc()
                    log.warning("context length refused, retrying with the window the provider named",
                                extra={**fields, "context_window": window})  # fmt: skip
                    continue
                run.unexpected += 0 if is_permanent(exc) else 1
                permanent = is_permanent(exc) or run.unexpected >= self.max_unexpected_attempts
                metrics.FAILURES.labels("summarize", type(exc).__name__, "no" if permanent else "yes").inc()
                log.error("summary job failed", exc_info=not is_permanent(exc),
                          extra={**fields, "error_class": type(exc).__name__, "permanent": permanent})  # fmt: skip
                delay = self.backoff.delay(run.unexpected)
                if permanent or loop.time() + delay >= run.deadline:
                    await self._give_up(run, exc, coords, key, fields, retryable=False)
                    break
                await asyncio.sleep(delay)
                continue
            if result.outcome in ("summary", "cached"):
                # What the run spent, published or not: a revocation can cut the publish after its
                # send, and the partition's next owner then finds the version taken (``distill
                # replay`` counts its LLM calls and cache hits from these lines).
                made = result.record if result.outcome == "summary" else None
                # The failed attempts' calls reached the model too (a 500 after a rewrite, a refusal).
                calls = (made.report.model_calls if isinstance(made, SessionSummary) else 0) + run.model_calls()
                log.info("summary made", extra={**fields, "outcome": result.outcome, "events": result.events,
                                                 "model_calls": calls})  # fmt: skip
            await self._turn()
            published = "deleted" if run.deleted else (
                await self._publish_checked(result, coords.partition, key, fields, run.job))  # fmt: skip
            if published == "deleted":
                await self._abandon(run, coords, key, fields)
            if published != "switched":
                break
            # The session switched epochs while the job ran: run it again on the adopted line's head.

    async def _attempt(self, run: _Run, partition: int, timer: asyncio.Timeout) -> JobResult:
        """One attempt of ``run``'s job, in a task of its own that a deletion of its session cancels."""
        attempt = run.attempt = asyncio.ensure_future(
            self.summarize.handle(run.job, partition, partial(self._model_slot, timer, run))
        )
        try:
            return await attempt
        finally:
            run.attempt = None

    def session_deleted(self, job: SummaryJob) -> bool:
        """Whether ``job``'s session was deleted since the job was decided (as the track table says now)."""
        if self.tracked is None:
            return False
        return deleted_since(job, self.tracked(table_key(job.app_name, job.user_id, job.session_id, FULL_SESSION)))

    def sessions_deleted(self, deletions: Iterable[tuple[SessionKey, int]]) -> int:
        """The track agent folded a ``delete_session`` of each session at each offset into the table.

        The running jobs decided before it (:func:`~streams.app.summarize.decided_before`, judged
        without reading the table: its store may answer only for the partition folded last) are
        cancelled: a job waiting for a model slot (or anything before its call) never sends its
        request, a call in progress is dropped, a job between attempts starts no other, and the
        job ends without a summary (``_abandon``). Returns how many attempts were cancelled.
        """
        cancelled = 0
        for sk, offset in deletions:
            for run in self._runs.get(session_id_of(*sk), ()):
                if not decided_before(run.job, offset):
                    continue
                run.deleted = True
                attempt = run.attempt
                if attempt is not None and not attempt.done():
                    attempt.cancel()
                    cancelled += 1
        return cancelled

    async def _abandon(self, run: _Run, coords: Coordinates, key: bytes, fields: dict[str, Any]) -> None:
        """End a job whose session was deleted after it was decided: its events (deleted history) reach
        no model and no summary. A request waiting for it is answered (``SessionDeletedError``); the
        track side dropped the key's queue at the deletion, so nothing else is published."""
        job = run.job
        metrics.JOBS_DONE.labels("deleted").inc()
        log.info("summary job abandoned: its session was deleted", extra={**fields, "attempts": run.attempts})
        if job.reply_to is None:
            return
        reason = f"the session was deleted after summary job {job.job_id} was decided: its events are not summarized"
        answer = self.summarize.failure(job, SessionDeletedError(reason))
        await self._send_retrying(self.topics.summaries, key, answer.model_dump_json().encode(), coords, fields)

    @contextlib.asynccontextmanager
    async def _model_slot(self, timer: asyncio.Timeout, run: _Run) -> AsyncIterator[None]:
        """One of the ``async_summary_num`` model-call slots; the job's clock stops while it waits."""
        loop = asyncio.get_running_loop()
        waiting_since = loop.time()
        timer.reschedule(None)
        try:
            await self._turn()  # before taking a slot: a job giving way holds none, and its clock stops
            await self.model_slots.acquire()
        finally:
            run.deadline += loop.time() - waiting_since
            timer.reschedule(run.deadline)
        try:
            if self.session_deleted(run.job):  # deleted while the job waited: its request is never sent
                raise SessionDeletedError(f"the session of summary job {run.job.job_id} was deleted")
            yield
        finally:
            self.model_slots.release()

    async def _turn(self) -> None:
        if self.give_way is not None:
            await self.give_way.turn()

    async def _publish_checked(
        self, result: JobResult, partition: int, key: bytes, fields: dict[str, Any], job: SummaryJob | None = None
    ) -> Published:
        """Publish ``result`` of ``job``, retried while Kafka fails; a send that failed re-reads the ledger first.

        A send that timed out may still have landed: the next try reads the summaries
        partition again, and the compare-and-set then finds the version taken. ``switched``:
        not published because the session now follows another epoch (run the job again);
        ``deleted``: not published because the session was deleted since ``job`` was decided.
        """
        attempt = 0
        while True:
            try:
                return await self._publish(result, partition, key, job)
            except (RetryableError, KafkaError) as exc:
                self.ledger.forget({partition})
                await self._back_off(exc, attempt, "summary publish failed, retrying", fields)
                attempt += 1

    async def _publish(self, result: JobResult, partition: int, key: bytes, job: SummaryJob | None = None) -> Published:
        record = result.record
        if job is not None and self.session_deleted(job):
            return "deleted"
        if not isinstance(record, SessionSummary):
            if record is not None and result.served_epoch is not None:
                return await self._publish_answer(result, record, partition, key, job)
            metrics.JOBS_DONE.labels(result.outcome).inc()
            if record is not None:
                assert self.send is not None
                await self.send(self.topics.summaries, key, record.model_dump_json().encode(), partition, [])
            return "published"
        # Compare-and-set on the key's head, epoch and version: a version of a line is published
        # once whatever ran at once, and never on a line the session has left.
        async with self._head_lock(summary_key(record)):
            await self.ledger.ready(partition)
            head = self.ledger.head(partition, summary_key(record))
            served = self.ledger.epoch_of(partition, session_id_of(*record.session_key))
            if job is not None and self.session_deleted(job):  # checked again after the last wait before the send
                return "deleted"
            if record.epoch != served:
                log.info("summary dropped: the session switched epochs, the job runs again", extra={
                    "partition": partition, "session_id": record.session_id, "filter_key": record.filter_key,
                    "epoch": record.epoch, "served_epoch": served, "job_id": record.job_id})  # fmt: skip
                return "switched"
            built_on = record.version - 1
            if (head.version if head is not None else 0) != built_on:
                metrics.JOBS_DONE.labels("stale").inc()
                log.info("summary dropped: its version is taken", extra={
                    "partition": partition, "session_id": record.session_id, "filter_key": record.filter_key,
                    "version": record.version, "head": head.version if head else 0,
                    "job_id": record.job_id})  # fmt: skip
                return "published"
            assert self.send is not None
            headers = summary_headers(result.events_offset, result.input_hash)
            sent = await self.send(self.topics.summaries, key, record.model_dump_json().encode(), partition, headers)
            self.ledger.record(partition, record, result.events_offset, _offset_of(sent))
        metrics.JOBS_DONE.labels(result.outcome).inc()
        if result.input_hash:
            self.cache.put(result.input_hash, record)
        if result.outcome == "cached":
            metrics.CACHE_HITS.inc()
        elif record.report.length_cut is not None:  # a cached record's cut was counted when it was made
            metrics.LENGTH_CUTS.inc()
        metrics.TOKENS.labels("in").inc(record.stats.input_tokens)
        metrics.TOKENS.labels("out").inc(record.stats.output_tokens)
        log.info(
            "summary published",
            extra={"topic": self.topics.summaries, "partition": partition, "session_id": record.session_id,
                   "filter_key": record.filter_key, "version": record.version, "epoch": record.epoch,
                   "job_id": record.job_id, "model": record.model, "prompt_version": record.prompt_version,
                   "outcome": result.outcome, "events": result.events},
        )  # fmt: skip
        return "published"

    async def _publish_answer(
        self, result: JobResult, record: SummaryFailure | SummaryReply, partition: int, key: bytes,
        job: SummaryJob | None = None,
    ) -> Published:  # fmt: skip
        """Publish a reply or a join's answer, under the key's head lock, if the session is still served
        from the epoch it was decided on (``switched``: a switch landed meanwhile, decide it again) and
        was not deleted since ``job`` was decided (``deleted``).

        A switch takes the head locks of the session's keys, so a reply naming a summary of the
        line the session left can never follow the switch on the topic.
        """
        name = table_key(record.app_name, record.user_id, record.session_id, record.filter_key)
        async with self._head_lock(name):
            await self.ledger.ready(partition)
            served = self.ledger.epoch_of(partition, session_id_of(record.app_name, record.user_id,
                                                                   record.session_id))  # fmt: skip
            if job is not None and self.session_deleted(job):
                return "deleted"
            if served != result.served_epoch:
                log.info("answer dropped: the session switched epochs, the job runs again", extra={
                    "partition": partition, "session_id": record.session_id, "filter_key": record.filter_key,
                    "epoch": result.served_epoch, "served_epoch": served, "job_id": record.job_id})  # fmt: skip
                return "switched"
            assert self.send is not None
            await self.send(self.topics.summaries, key, record.model_dump_json().encode(), partition, [])
        metrics.JOBS_DONE.labels(result.outcome).inc()
        return "published"

    async def run_adoption(self, command: AdoptEpoch, coords: Coordinates, key: bytes) -> None:
        """Switch the command's session to its epoch, or answer why not (``streams.app.epochs``).

        Under the head locks of every key of the session, so no summary of the line it
        leaves is published after the switch: a job racing it loses its compare-and-set
        and runs again on the adopted head. The ``EpochAdopted`` record is published to
        the session's summaries partition; a command applied before (delivered again) is
        not applied twice.
        """
        partition = coords.partition
        session = session_id_of(*command.session_key)
        fields = {**coords.log_fields(), "session_id": command.session_id, "epoch": command.epoch,
                  "command_id": command.command_id}  # fmt: skip
        attempt = 0
        while True:
            try:
                await self._adopt(command, partition, session, key, fields)
                return
            except (RetryableError, KafkaError) as exc:
                self.ledger.forget({partition})
                await self._back_off(exc, attempt, "epoch switch failed, retrying", fields)
                attempt += 1

    async def _adopt(
        self, command: AdoptEpoch, partition: int, session: str, key: bytes, fields: dict[str, Any]
    ) -> None:
        await self.ledger.ready(partition)
        book = self.ledger.book
        names = {"", *book.session_heads(partition, session), *(h.summary.filter_key for h in command.heads),
                 *(book.parked(partition, session, command.epoch) or ())}  # fmt: skip
        async with contextlib.AsyncExitStack() as stack:
            for fk in sorted(names):
                await stack.enter_async_context(self._head_lock(f"{session}{KEY_SEPARATOR}{fk}"))
            await self.ledger.ready(partition)
            if book.applied(partition, session, command.command_id):
                log.info("epoch switch already applied", extra=fields)
                return
            served = book.epoch_of(partition, session)
            live = book.session_heads(partition, session)
            answer = decide_adoption(command, served, live, book.parked(partition, session, command.epoch),
                                     now_utc(), self._first_offset(command))  # fmt: skip
            assert self.send is not None
            raw = answer.model_dump_json().encode()
            sent = await self.send(self.topics.summaries, key, raw, partition, [])
            if isinstance(answer, EpochAdopted):
                self.ledger.adopt(partition, answer, _offset_of(sent))
        if isinstance(answer, EpochAdopted):
            metrics.JOBS_DONE.labels("epoch_adopted").inc()
            log.info("epoch adopted", extra={**fields, "previous_epoch": answer.previous_epoch,
                                             "keys": len(answer.heads), "caught_up": answer.caught_up})  # fmt: skip
        else:
            metrics.JOBS_DONE.labels("epoch_refused").inc()
            log.info("epoch switch refused", extra={**fields, "error_class": answer.error_class,
                                                    "reason": answer.reason[:300]})  # fmt: skip

    def _first_offset(self, command: AdoptEpoch) -> int | None:
        """The events-topic offset of the session's first record as the track table knows it (``None``: not known)."""
        if self.tracked is None:
            return None
        found = self.tracked(table_key(*command.session_key, FULL_SESSION))
        return found.first_offset if found is not None else None

    def _recently_given_up(self, job: SummaryJob, within_s: float, now: float) -> bool:
        at = self._given_up.get(job_pool_key(job))
        return at is not None and now - at <= within_s

    def _note_given_up(self, job: SummaryJob, now: float) -> None:
        if len(self._given_up) >= 10_000:  # a bound: the oldest half goes
            for name in sorted(self._given_up, key=self._given_up.__getitem__)[:5_000]:
                del self._given_up[name]
        self._given_up[job_pool_key(job)] = now

    @contextlib.asynccontextmanager
    async def _head_lock(self, name: str) -> AsyncIterator[None]:
        """The per-key lock of the compare-and-set (dropped once nobody holds or waits for it)."""
        entry = self._head_locks.get(name)
        if entry is None:
            entry = self._head_locks[name] = [asyncio.Lock(), 0]
        entry[1] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1] -= 1
            if not entry[1]:
                self._head_locks.pop(name, None)

    async def reject_job(self, rejected: Rejected, coords: Coordinates, key: bytes | None) -> None:
        """Dead-letter a jobs-topic record that is no job (``Rejected``: its bytes, key and reason).

        Nothing waits for it (no job id is known) and no key's boundary moves: the record is kept
        where ``distill dead-letters`` shows it, and the jobs after it run as usual.
        """
        fields = {**coords.log_fields(), "error_class": rejected.error_class}
        log.error("undecodable summary job dead-lettered", extra=fields)
        dl = dead_letter_for(rejected.raw, key, coords, rejected.error_class, rejected.reason, "summarize")
        await self._send_retrying(self.topics.dead_letters, key or b"", dl.model_dump_json().encode(), coords, fields)
        metrics.DEAD_LETTERS.labels("summarize", rejected.error_class).inc()

    async def _give_up(
        self, run: _Run, exc: BaseException, coords: Coordinates, key: bytes, fields: dict[str, Any],
        *, retryable: bool,
    ) -> None:  # fmt: skip
        """Answer the job with a failure and dead-letter it; each send retried like a transient failure.

        A job whose session was deleted meanwhile is abandoned instead: its record (a sync
        request's carries the caller's messages) is not kept on the dead-letter topic.
        """
        job = run.job
        if run.deleted or self.session_deleted(job):
            await self._abandon(run, coords, key, fields)
            return
        self._note_given_up(job, asyncio.get_running_loop().time())
        reason = f"given up after {run.attempts} attempt(s): {type(exc).__name__}: {exc}"
        failure: SummaryFailure = self.summarize.failure(job, exc).model_copy(
            update={"gave_up": True, "retryable": retryable, "attempts": run.attempts, "reason": reason[:2000],
                    "report": run.report(), "context_window": run.window})  # fmt: skip
        dl: DeadLetter = dead_letter_for(
            job.model_dump_json().encode(), key, coords, type(exc).__name__, reason[:2000], "summarize"
        )
        log.error("summary job given up", extra={**fields, "error_class": type(exc).__name__,
                  "attempts": run.attempts, "retryable": retryable, "context_window": run.window,
                  "model_calls": run.model_calls()})  # fmt: skip
        sent = await self._send_retrying(self.topics.summaries, key, failure.model_dump_json().encode(), coords, fields)
        # A request waiting for the job is answered with it.
        self.ledger.record_failure(coords.partition, failure, _offset_of(sent))
        await self._send_retrying(self.topics.dead_letters, key, dl.model_dump_json().encode(), coords, fields)
        metrics.DEAD_LETTERS.labels("summarize", type(exc).__name__).inc()

    async def _send_retrying(
        self, topic: str, key: bytes, value: bytes, coords: Coordinates, fields: dict[str, Any]
    ) -> Any:
        """``send`` to the job's partition of ``topic``, retried with backoff while Kafka fails (never dropped);
        returns what the send returned (the record's metadata)."""
        assert self.send is not None
        attempt = 0
        while True:
            try:
                return await self.send(topic, key, value, coords.partition, [])
            except (RetryableError, KafkaError) as exc:
                await self._back_off(exc, attempt, "summary job failure send failed, retrying",
                                     {**fields, "to_topic": topic})  # fmt: skip
                attempt += 1

    async def _back_off(self, exc: RetryableError | KafkaError, attempt: int, message: str,
                        fields: dict[str, Any], delay: float | None = None) -> None:  # fmt: skip
        """A transient failure of a job's ``attempt`` (0-based): count it, log it, sleep the backoff."""
        if delay is None:
            retry_after = exc.retry_after if isinstance(exc, RetryableError) else None
            delay = self.backoff.delay(attempt, retry_after)
        metrics.FAILURES.labels("summarize", type(exc).__name__, "yes").inc()
        log.warning(message, extra={**fields, "attempt": attempt + 1, "error_class": type(exc).__name__,
                                    "retry_in_s": round(delay, 3)})  # fmt: skip
        await asyncio.sleep(delay)


class JobTimeoutError(RetryableError):
    """A job ran past its ``job_timeout_s``: the attempt in progress was cancelled."""


class JobSupersededError(PermanentError):
    """A re-emitted job whose key's job was just given up (answered, not run, no cooldown)."""


class SessionDeletedError(PermanentError):
    """The job's session was deleted after the job was decided: its events are not summarized."""


def learned_window(exc: BaseException) -> int | None:
    """The window a context-length refusal named (on ``exc`` or an error it was raised from)."""
    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < 8:
        if isinstance(current, ContextLengthError) and current.context_window:
            return current.context_window
        current, seen = current.__cause__ or current.__context__, seen + 1
    return None


@dataclass(eq=False)
class _Run:
    """One job's attempts: the calls they made, the window a refusal taught."""

    job: SummaryJob
    deadline: float = 0.0
    """Loop time the job gives up at: ``job_timeout_s`` after its start, plus any wait for a model slot."""
    attempts: int = 0
    unexpected: int = 0
    window: int | None = None
    calls: list[CallReport] = field(default_factory=list)
    counted: int = 0
    """How many of ``calls`` a line of the job has counted (:meth:`model_calls`)."""
    attempt: asyncio.Task[JobResult] | None = None
    """The attempt running now (``sessions_deleted`` cancels it)."""
    deleted: bool = False
    """The job's session was deleted after it was decided: its attempt (if any) was cancelled, and it starts
    no other."""

    def __post_init__(self) -> None:
        self.window = self.job.summary_context_window

    def note(self, exc: BaseException) -> None:
        """Keep the calls of a failed attempt (the summarizer's report on its error)."""
        report = report_of(exc)
        if report is not None:
            self.calls.extend(report.calls)

    def model_calls(self) -> int:
        """The calls of the failed attempts that reached the model and no earlier line of the job counted (a
        job run again after an epoch switch logs a line per run: ``distill replay`` adds them up)."""
        fresh = self.calls[self.counted :]
        self.counted = len(self.calls)
        return count_model_calls(fresh)

    def retry_with_window(self, window: int) -> bool:
        """Whether to try again budgeted with ``window`` (once per smaller window)."""
        if self.window is not None and window >= self.window:
            return False
        self.window = window
        self.job = self.job.model_copy(update={"summary_context_window": window})
        return True

    def report(self) -> SummaryReport:
        return SummaryReport(trigger=self.job.trigger, calls=tuple(self.calls), passes=max(1, self.attempts))


def _offset_of(sent: Any) -> int | None:
    """The offset a send's metadata names (``None``: a send that returns none, as test doubles do)."""
    offset = getattr(sent, "offset", None)
    return offset if isinstance(offset, int) else None


def job_pool_key(job: SummaryJob) -> str:
    return table_key(job.app_name, job.user_id, job.session_id, job.filter_key)


def now_utc() -> datetime:
    return datetime.now(UTC)
