"""The summarize use case: one ``SummaryJob`` → a ``SessionSummary`` (or a failure answer).

No Faust here. Per job:

1. the ledger is caught up for the job's partition, and the key's head (latest
   summary) is looked up;
2. a job whose target the head already covers, built on another version than
   the head (an older one, or one of the line the session left, see
   :mod:`schemas.epochs`), is stale: nothing is produced (a ``summarize_sync``
   job is answered with the covering summary, a :class:`~schemas.SummaryReply`)
   — so a re-emitted or duplicated job can never yield a second summary for a
   boundary. A job reaching beyond the head is rebased on it (its delta starts
   after the head's boundary). A ``join`` job (a sync request that waits for
   the key's jobs decided before it, which ran before it: one job at a time per
   key, in order) is answered with the head — the latest summary of the epoch
   the session is served from — or with the failure of the job it waited for.
   A reply or a join's answer names the epoch it was decided on
   (``JobResult.served_epoch``): the worker publishes it only while the session
   is still served from it;
3. the delta is read from the events topic (:mod:`streams.app.event_log`);
4. the content-addressed cache is consulted — addressed by what the summarizer
   would send (``Summarizer.cache_key``: its first request, every selected
   event, the model, the output settings) — else the summarizer runs;
5. the result carries version ``head + 1`` on the head's epoch (a key without a
   head: its session's served epoch, :mod:`schemas.epochs`): versions only grow
   within an epoch.

Transient failures raise :class:`~streams.errors.RetryableError` (the caller
retries with backoff); permanent ones become a :class:`SummaryFailure`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Literal, Protocol

from schemas import (
    SessionEvent,
    SessionKey,
    SessionSummary,
    SummaryBoundary,
    SummaryFailure,
    SummaryJob,
    SummaryReply,
)
from schemas.base import copy_with
from schemas.event_ids import FirstDigests, record_digest, reuse_problem
from streams.app.cache import SummaryCache, input_hash
from streams.app.decoding import decode_event_record
from streams.app.event_ids import digests_in
from streams.app.event_log import RawEvent
from streams.app.heads import Head, session_id_of
from streams.app.tracked import TrackedKey, table_key
from streams.errors import DistillError, PermanentError
from streams.rules.boundaries import delta_in_log_order, early_ids, events_after
from streams.rules.filter_keys import in_summary_input
from streams.summarizer import SummarizerLike, SummarySkipped

log = logging.getLogger(__name__)

Outcome = Literal["summary", "cached", "stale", "skipped", "failed", "replied"]


@dataclass(frozen=True)
class JobResult:
    """What to publish for a job (``None``: nothing) and how it went."""

    outcome: Outcome
    record: SessionSummary | SummaryFailure | SummaryReply | None = None
    events_offset: int | None = None
    input_hash: str | None = None
    events: int = 0
    served_epoch: int | None = None
    """For an answer naming the key's outcome (a reply, a join's answer): the epoch the session was served
    from when it was decided. Published only while it still is (a switch in between: decided again)."""


@dataclass(frozen=True)
class _Delta:
    previous: Head | None
    events: list[SessionEvent]
    raw: list[bytes]
    offsets: dict[str, int]


class Heads(Protocol):
    """The latest summary per key (:class:`~streams.app.ledger.SummaryLedger`)."""

    async def ready(self, partition: int) -> None: ...

    def head(self, partition: int, key: str) -> Head | None: ...

    def epoch_of(self, partition: int, session: str) -> int: ...

    def failure(self, partition: int, key: str) -> SummaryFailure | None: ...


ModelSlot = Callable[[], AbstractAsyncContextManager[None]]
"""What a job holds while its summarizer calls the model (``WorkerRuntime`` bounds them)."""


class EventSource(Protocol):
    """A session's records of one events partition (:class:`~streams.app.event_log.EventLogReader`)."""

    async def read(self, partition: int, start: int, end: int, key: bytes) -> list[RawEvent]: ...


class SummarizeHandler:
    """See the module docstring."""

    def __init__(
        self,
        ledger: Heads,
        reader: EventSource,
        summarizer_for: Callable[[str], SummarizerLike],
        cache: SummaryCache | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        max_record_bytes: int | None = None,
        digests: FirstDigests | None = None,
    ) -> None:
        """``max_record_bytes``: a record over it is read into no summary, as the track side refuses it
        (``None``: any size). ``digests``: the track side's memory of each session's event ids
        (``schemas.event_ids``): a record it refuses for reusing an id is read into no summary either
        (a session it does not know is read from the log; ``None``: no such rule)."""
        self.digests = digests
        self.max_record_bytes = max_record_bytes
        self.ledger = ledger
        self.reader = reader
        self.summarizer_for = summarizer_for
        self.cache = cache
        self.clock = clock

    async def handle(self, job: SummaryJob, partition: int, model_slot: ModelSlot = nullcontext) -> JobResult:
        """Run ``job``; ``model_slot`` is entered around the summarizer call only (a job answered
        from the cache, stale or with nothing to summarize never waits for one)."""
        await self.ledger.ready(partition)
        served = self.ledger.epoch_of(partition, session_id_of(*job.session_key))
        result = await self._handle(job, partition, served, model_slot)
        if job.reply_to is not None and result.record is not None and not isinstance(result.record, SessionSummary):
            # An answer to a waiting request that names no new summary: true of the served epoch only.
            return replace(result, served_epoch=served)
        return result

    async def _handle(self, job: SummaryJob, partition: int, served: int, model_slot: ModelSlot) -> JobResult:
        key = table_key(job.app_name, job.user_id, job.session_id, job.filter_key)
        head = self.ledger.head(partition, key)
        if job.origin == "join":
            return self._join(job, partition, key, head)
        version = head.version if head is not None else 0
        # Versions count per epoch: a job decided on the line the session left may carry a
        # from_version above the adopted head's, so only a job built on this very version is exempt
        # (it runs: its empty delta is answered below), unless a request waits for the covering summary.
        # A head of deleted history covers nothing of the session since (history re-imported with its
        # event ids and timestamps seems covered by it): a request is never answered with it.
        if (
            head is not None
            and covers(head, job)
            and (version != job.from_version or job.reply_to is not None)
            and not before_session_start(head, job)
        ):
            if job.reply_to is None:
                return JobResult("stale")
            return JobResult("replied", self._reply(job, head, job.reply_to))
        epoch = head.epoch if head is not None else served
        fresh = job.previous_boundary is None and version == job.from_version
        previous = head if head is not None and not fresh and not before_session_start(head, job) else None
        delta = await self._delta(job, partition, previous)
        if not delta.events:
            return self._nothing(job, "no events after the boundary up to the job's target", version)
        summarizer = self.summarizer_for(job.app_name)
        previous_text = previous.summary if previous is not None else ""
        digest = None
        key_of = getattr(summarizer, "cache_key", None)
        if callable(key_of):
            # The address of what the summarizer would send (request, model, output settings).
            digest = key_of(
                previous_text, delta.events, filter_key=job.filter_key, model_request=job.model_request,
                force=job.force, context_window=job.summary_context_window,
            )  # fmt: skip
        elif "prompt_version" in (meta := summarizer.metadata()):
            digest = input_hash(
                previous_text, delta.raw, filter_key=job.filter_key, force=job.force,
                prompt_version=str(meta["prompt_version"]), model=str(meta.get("model_name", "")),
                model_request=job.model_request,
            )  # fmt: skip
        cached = self.cache.get(digest) if self.cache is not None and digest else None
        if cached is not None:
            summary = self._from_cache(cached, job, version, previous, epoch)
            return JobResult("cached", summary, delta.offsets.get(summary.boundary.last_event_id or ""), digest,
                             len(delta.events))  # fmt: skip
        try:
            async with model_slot():
                result = await summarizer.summarize(
                    previous_text,
                    delta.events,
                    job.trigger,
                    session=job.session_key,
                    filter_key=job.filter_key,
                    model_request=job.model_request,
                    force=job.force,
                    # The producer's markers first: distill's own keys cannot be spoofed by them.
                    context={**job.context, "job_id": job.job_id, "origin": job.origin, "app_name": job.app_name},
                    # A window a context-length refusal taught the key (only passed when there is one).
                    **({"context_window": job.summary_context_window} if job.summary_context_window else {}),
                )
        except SummarySkipped as exc:
            return self._nothing(job, str(exc), version)
        new_version = version + 1
        prev_boundary = previous.boundary if previous is not None else None
        boundary = result.boundary(new_version, prev_boundary)
        summary = SessionSummary(
            app_name=job.app_name,
            user_id=job.user_id,
            session_id=job.session_id,
            filter_key=job.filter_key,
            summary=result.text,
            version=new_version,
            previous_version=version or None,
            epoch=epoch,
            boundary=boundary,
            previous_boundary=prev_boundary,
            model=result.model,
            prompt_version=result.prompt_version,
            created_at=self.clock(),
            stats=result.stats,
            report=result.report,
            job_id=job.job_id,
            reply_to=job.reply_to,
            caught_up=result.caught_up,
            chain_from_offset=chain_start(previous, job),
        )
        events_offset = delta.offsets.get(boundary.last_event_id or "")
        if events_offset is None and previous is not None:
            events_offset = previous.events_offset
        return JobResult("summary", summary, events_offset, digest, len(delta.events))

    def failure(self, job: SummaryJob, exc: BaseException) -> SummaryFailure:
        """The answer for a job given up for good (the track side releases the key)."""
        return SummaryFailure(
            app_name=job.app_name,
            user_id=job.user_id,
            session_id=job.session_id,
            filter_key=job.filter_key,
            job_id=job.job_id,
            reply_to=job.reply_to,
            error_class=type(exc).__name__,
            reason=str(exc)[:2000],
            created_at=self.clock(),
            upto_event_id=job.upto.last_event_id,
            events_from_offset=job.events_from_offset,
        )

    def _join(self, job: SummaryJob, partition: int, key: str, head: Head | None) -> JobResult:
        """A ``join`` job: the key's earlier jobs are done; answer with their outcome.

        The failure of the job it waited for (the key's last given-up job, aiming
        at the join's target) when no summary came after it and the head does not
        reach the target; else the head, which covers the target or is the newest
        summary there is (a failure of a later range the track side already gave
        back does not answer a request that waits for an earlier boundary).
        """
        reply_to = job.reply_to
        if reply_to is None:
            return JobResult("stale")
        failed = self.ledger.failure(partition, key)
        if (
            failed is not None
            and failed.upto_event_id in (None, job.upto.last_event_id)
            and (head is None or not covers(head, job))
        ):
            reason = (
                f"the summary job {failed.job_id} this request joined failed "
                f"(no summary covers event {job.upto.last_event_id!r}): {failed.reason}"
            )
            answer = failed.model_copy(update={
                "job_id": job.job_id, "reply_to": reply_to, "reason": reason[:2000], "gave_up": False,
                "context_window": None, "created_at": self.clock(),
            })  # fmt: skip
            return JobResult("failed", answer)
        if head is None:
            return self._nothing(job, "no summary of the key covers the events the request waited for", 0)
        return JobResult("replied", self._reply(job, head, reply_to))

    def _reply(self, job: SummaryJob, head: Head, reply_to: str) -> SummaryReply:
        """``job``'s answer naming the key's latest summary (``head``), unchanged."""
        return SummaryReply(
            app_name=job.app_name, user_id=job.user_id, session_id=job.session_id, filter_key=job.filter_key,
            job_id=job.job_id, reply_to=reply_to, summary=head.record, created_at=self.clock(),
        )  # fmt: skip

    def _nothing(self, job: SummaryJob, reason: str, version: int) -> JobResult:
        return JobResult("skipped", self.failure(job, SummarySkipped(f"{reason} (latest version {version})")))

    async def _delta(self, job: SummaryJob, partition: int, previous: Head | None) -> _Delta:
        start = None
        boundary_offset = previous.events_offset if previous is not None else None
        if boundary_offset is not None:
            start = boundary_offset + 1
        if start is None:
            start = job.events_from_offset if job.events_from_offset is not None else 0
        end = job.upto.offset
        if end is None:
            raise PermanentError(f"job {job.job_id} has no target offset")
        # The session's own record key (any layout): records of other sessions sharing it are
        # dropped on decode by their ids.
        raw = await self.reader.read(partition, start, end, job.events_key())
        events, raws, offsets = self._decode(job, raw)
        events, raws = await self._without_reused(job, partition, start, events, raws)
        if previous is not None:
            if boundary_offset is not None:
                # Read from after the boundary's offset: every record is after it in the log (see
                # ``delta_in_log_order``); the log before it tells a late event from one sent again.
                early = early_ids(events, previous.boundary)
                summarized = await self._ids_before(job, partition, boundary_offset, early) if early else set()
                kept = delta_in_log_order(events, previous.boundary, summarized)
            else:
                kept = events_after(events, previous.boundary)
            if len(kept) != len(events):  # ``kept`` is a subsequence of ``events``: as long, the same
                keep_ids = {e.event_id for e in kept}
                raws = [r for e, r in zip(events, raws, strict=True) if e.event_id in keep_ids]
            events = kept
        return _Delta(previous, events, raws, offsets)

    async def _without_reused(
        self, job: SummaryJob, partition: int, start: int, events: list[SessionEvent], raws: list[bytes]
    ) -> tuple[list[SessionEvent], list[bytes]]:
        """``events`` (read from ``start``, each id once: its first record there) without those the track side
        refused for reusing an event id of the session with other content (``schemas.event_ids``): their id's
        first record lies before ``start`` with another digest.

        The track side's memory answers when it knows the session and has judged every record before
        ``start`` (what it learnt since names ids first logged later too: their first digest is what the
        records here are judged by); else the session's records before ``start`` are read (from its first
        offset: after a restart, until the track side reads the session again).
        """
        memory = self.digests
        if memory is None or not events:
            return events, raws
        sk = SessionKey(job.app_name, job.user_id, job.session_id)
        first = memory.first(partition, sk)
        if first is None or (memory.next_offset(partition) or 0) < start:
            begin = job.events_from_offset if job.events_from_offset is not None else 0
            if begin >= start:
                return events, raws
            before = await self.reader.read(partition, begin, start - 1, job.events_key())
            first = digests_in(before, sk, self.max_record_bytes)
        if not first:
            return events, raws
        kept = [n for n, e in enumerate(events) if not _reused(sk, e.event_id, first.get(e.event_id), raws[n])]
        if len(kept) == len(events):
            return events, raws
        return [events[n] for n in kept], [raws[n] for n in kept]

    async def _ids_before(self, job: SummaryJob, partition: int, boundary_offset: int, ids: set[str]) -> set[str]:
        """Which of ``ids`` the session's records up to ``boundary_offset`` hold (summarized already).

        Runs only when records after a boundary are stamped at or before its cutoff (rare): it
        reads the session's records from its first offset.
        """
        start = job.events_from_offset if job.events_from_offset is not None else 0
        raw = await self.reader.read(partition, start, boundary_offset, job.events_key())
        events, _, _ = self._decode(job, raw)
        return {e.event_id for e in events} & ids

    def _event(self, item: RawEvent) -> SessionEvent | None:
        """The session event a record holds (``None``: a command, or not decodable)."""
        if item.event is not None:  # the track agent's decode of these bytes, kept by the record buffer
            return item.event
        # The track side's decode (events in one pydantic step), and its limit: a record it dead-lettered as
        # oversized (the topic takes a little more) was read into summaries all the same.
        record = decode_event_record(item.value, self.max_record_bytes)
        return record if isinstance(record, SessionEvent) else None

    def _decode(self, job: SummaryJob, raw: list[RawEvent]) -> tuple[list[SessionEvent], list[bytes], dict[str, int]]:
        """The job's session events among ``raw`` (its ids and its filter key's input), each once."""
        events: list[SessionEvent] = []
        raws: list[bytes] = []
        offsets: dict[str, int] = {}  # by event id: also the ids taken so far
        session = (job.session_id, job.user_id, job.app_name)
        event_of = self._event
        for item in raw:
            record = event_of(item)
            if record is None or record.event_id in offsets:
                continue
            if (record.session_id, record.user_id, record.app_name) != session:
                continue
            if not in_summary_input(record.filter_key, job.filter_key):
                continue
            events.append(record)
            raws.append(item.value)
            offsets[record.event_id] = item.offset
        return events, raws, offsets

    def _from_cache(
        self, cached: SessionSummary, job: SummaryJob, version: int, previous: Head | None, epoch: int
    ) -> SessionSummary:
        """The cached summary as the key's next version on ``epoch``; its boundary is kept as cached
        (``boundary.version`` is the boundary *format* version, not the summary's)."""
        new_version = version + 1
        prev_boundary = previous.boundary if previous is not None else None
        return copy_with(
            cached,
            {
                "version": new_version,
                "previous_version": version or None,
                "epoch": epoch,
                "previous_boundary": prev_boundary,
                "job_id": job.job_id,
                "reply_to": job.reply_to,
                "created_at": self.clock(),
                "chain_from_offset": chain_start(previous, job),
            },
        )


def chain_start(previous: Head | None, job: SummaryJob) -> int | None:
    """Where the input of the chain that ``job``'s summary on ``previous`` extends began (its ``chain_from_offset``).

    Rolling a previous summary forward keeps its chain's start (unknown stays unknown:
    a summary of an older build); a first summary starts where its delta is read from,
    the session's first offset as the job knows it (not known: ``None``).
    """
    if previous is not None:
        return previous.record.chain_from_offset
    return job.events_from_offset


def before_session_start(head: Head, job: SummaryJob) -> bool:
    """``head``'s boundary lies before the session's first record as ``job`` knows it.

    A job reads from the session's first offset (``events_from_offset``), which a
    ``delete_session`` resets to the first record after it; a summary of the records
    before (a job in flight at the deletion, answered after it) is then no predecessor:
    carried forward, it would bring the deleted history back into every later summary.
    """
    return (
        head.events_offset is not None
        and job.events_from_offset is not None
        and head.events_offset < job.events_from_offset
    )


def deleted_since(job: SummaryJob, session: TrackedKey | None) -> bool:
    """A ``delete_session`` of ``job``'s session was folded after ``job`` was decided.

    ``session``: the session's full-session entry of the track table as it is now. A
    job carries the session's first offset as it was when decided
    (``events_from_offset``); a deletion resets it (``None`` until the next event, then
    that event's offset: past every record the job reads). The job's events are then
    deleted history, which must neither reach the model nor come back in a summary.
    Not known (no entry, a job without the offset, a ``join`` reading no events) is no
    deletion.
    """
    if session is None or job.events_from_offset is None or job.origin == "join":
        return False
    return session.first_offset is None or session.first_offset > job.events_from_offset


def decided_before(job: SummaryJob, deletion_offset: int) -> bool:
    """``job`` reads events of its session from before a ``delete_session`` at ``deletion_offset``.

    Decided on the log alone, not the track table (whose store may not answer for the
    session where the deletion is folded): the job carries the session's first offset as
    it was when decided (``events_from_offset``), and the session's events and commands
    share one partition. A job decided after the deletion starts past it (a deletion
    resets the first offset to the next event's), so a deletion delivered again cancels
    nothing. Not known (a job without the offset, a ``join`` reading no events) is not
    before, as in :func:`deleted_since`.
    """
    if job.events_from_offset is None or job.origin == "join":
        return False
    return job.events_from_offset < deletion_offset


def covers(head: Head, job: SummaryJob) -> bool:
    """Whether the head summary already reaches the job's target (the job would add nothing)."""
    if head.boundary.last_event_id is not None and head.boundary.last_event_id == job.upto.last_event_id:
        return True
    if head.events_offset is not None and job.upto.offset is not None:
        return head.events_offset >= job.upto.offset
    return head.boundary.cutoff_at >= job.upto.cutoff_at


def is_permanent(exc: BaseException) -> bool:
    """Errors retrying will not fix (anything of ours that is not retryable)."""
    from streams.errors import RetryableError

    return isinstance(exc, DistillError) and not isinstance(exc, RetryableError)


def _reused(session: SessionKey, event_id: str, first: str | None, raw: bytes) -> bool:
    """Whether the track side refused ``raw`` for reusing ``event_id`` (its id's first digest ``first``): the
    rule's own judgement (``schemas.event_ids.reuse_problem``), the record digested only when its id has one."""
    return first is not None and reuse_problem(session, event_id, first, record_digest(raw)) is not None


__all__ = ["JobResult", "SummarizeHandler", "SummaryBoundary", "chain_start", "deleted_since", "is_permanent"]
