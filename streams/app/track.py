"""The track use case: fold one events-topic record into the table, decide the jobs.

No Faust here: the table is any :class:`StateStore` (the Faust table in the
worker, a dict in unit tests). The track agent calls :meth:`TrackHandler.on_record`
for each events-topic record and :meth:`TrackHandler.on_summary_record` for each
summaries-topic record (both topics are co-partitioned with the table), then
sends what comes back.
"""

from __future__ import annotations

import base64
import enum
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Protocol

from schemas import (
    AdoptEpoch,
    DeadLetter,
    DeleteSession,
    EpochAdopted,
    EventTopicRecord,
    SessionEvent,
    SessionKey,
    SessionSummary,
    Summarize,
    SummarizeSync,
    SummaryBoundary,
    SummaryFailure,
    SummaryJob,
    SummaryReply,
)
from schemas.base import copy_with
from schemas.commands import KEY_COOLING_DOWN, NOTHING_TO_SUMMARIZE
from schemas.event_ids import EVENT_ID_REUSED, FirstDigests, record_digest
from streams.app.coordinates import Coordinates
from streams.app.decoding import Rejected, SummaryRecord
from streams.app.tracked import TrackedKey, table_key, tracked_key
from streams.rules.boundaries import delta_after, from_micros, to_micros
from streams.rules.filter_keys import FULL_SESSION
from streams.rules.planner import (
    Outcome,
    affected_keys,
    apply_command,
    apply_command_again,
    apply_event,
    command_targets,
    flight_for,
    resend_job,
    session_keys,
)
from streams.rules.policy import PolicySet, SummaryPolicy
from streams.rules.record_keys import RECORD_KEY_ERROR, encode_key, key_problem
from streams.rules.trigger_state import (
    SessionTriggerState,
    already_applied,
    before_deletion,
    cooldown_until,
    cooling_down,
    new_state,
    on_adoption,
    on_job_failed,
    on_summary,
    rebase,
    record_decision,
)

log = logging.getLogger(__name__)


class _Canonical(enum.Enum):
    KEY = "canonical"


CANONICAL_KEY = _Canonical.KEY
"""``TrackHandler.on_record``'s default key: the record's own ``SessionKey.kafka_key()``."""

DEAD_LETTER_VALUE_LIMIT = 64 * 1024
"""Most bytes of a rejected record kept on its dead letter (oversized records are cut)."""


class StateStore(Protocol):
    """The table: ``TrackedKey`` by :func:`~streams.app.tracked.table_key`."""

    def get(self, key: str) -> TrackedKey | None: ...

    def __setitem__(self, key: str, value: TrackedKey) -> None: ...

    def __delitem__(self, key: str) -> None: ...


@dataclass
class TrackOutput:
    """What the agent sends after one record."""

    jobs: list[SummaryJob] = field(default_factory=list)
    replies: list[SummaryFailure] = field(default_factory=list)
    dead_letter: DeadLetter | None = None
    adoptions: list[AdoptEpoch] = field(default_factory=list)
    """Epoch switches for the summarize side (jobs topic, the session's partition): it owns the heads."""


def dead_letter_for(
    raw: bytes,
    key: bytes | None,
    coords: Coordinates,
    error_class: str,
    reason: str,
    stage: str,
    limit: int = DEAD_LETTER_VALUE_LIMIT,
) -> DeadLetter:
    """A dead letter keeping at most ``limit`` raw bytes (base64 must still fit a Kafka record)."""
    kept = raw[:limit]
    if len(kept) < len(raw):
        reason = f"{reason} (value truncated to {len(kept)} of {len(raw)} bytes)"
    return DeadLetter(
        source_topic=coords.topic,
        source_partition=coords.partition,
        source_offset=coords.offset,
        key_b64=base64.b64encode(key).decode() if key is not None else None,
        value_b64=base64.b64encode(kept).decode(),
        error_class=error_class,
        reason=reason,
        stage=stage,
        failed_at=datetime.now(UTC),
    )


def nothing_to_summarize(
    command: SummarizeSync,
    outcome: Outcome,
    policy: SummaryPolicy,
    at: datetime,
    states: Mapping[str, SessionTriggerState | None] | None = None,
) -> SummaryFailure:
    """The answer to a ``summarize_sync`` that emitted no job (``error_class`` ``NothingToSummarize``).

    Only when the command has nothing to wait for either (no job decided for the
    key and no summary of it: see ``planner.join_job``). The reason names the
    allowlist when it refused the key (the Go guide's ``CreateSessionSummary``
    is then a no-op), else every decision's reason (``checks_failed``,
    ``empty_delta``, ...). A key that cools down after a given-up job is answered
    ``KeyCoolingDown`` instead (``states``: the keys' states before the command, for
    when it is tried again): a summary was due and failed, which the caller must not
    take for "nothing to summarize".
    """
    key = command.filter_key
    error_class = NOTHING_TO_SUMMARIZE
    cooling = next((d for d in outcome.decisions if d.filter_key == key and d.reason == "cooling_down"), None)
    if not policy.allows(key):
        reason = (
            f"filter key {key!r} is not allowed by the summary allowlist of app {command.app_name!r} "
            f"(filter_key_allowlist): nothing is summarized"
        )
    elif cooling is not None:
        # A summary was due and its job was given up: not "nothing to summarize" (the caller would take
        # the key as summarized as far as it can be), but the failure it is, with when it is tried again.
        error_class = KEY_COOLING_DOWN
        state = outcome.states.get(key) or (states or {}).get(key)
        failures = state.failed.failures if state is not None and state.failed is not None else 1
        until = cooldown_until(state, policy) if state is not None else None
        when = f"an event after {from_micros(until).isoformat()}" if until is not None else "a later event"
        reason = (
            f"the key's last summary job was given up ({failures} failure(s) in a row; the failure record "
            f"on the summaries topic names the cause); no job until {when}, or ask with force=True"
        )
    else:
        decided = ", ".join(f"{d.filter_key or '(session)'}: {d.reason}" for d in outcome.decisions)
        reason = f"no summary job was emitted ({decided or 'no target'})"
    return SummaryFailure(
        app_name=command.app_name,
        user_id=command.user_id,
        session_id=command.session_id,
        filter_key=key,
        job_id=f"command:{command.command_id}",
        reply_to=command.reply_to,
        error_class=error_class,
        reason=reason,
        created_at=at,
    )


def key_refused(command: SummarizeSync | AdoptEpoch, reason: str, at: datetime) -> SummaryFailure:
    """The answer to a ``summarize_sync`` or ``adopt_epoch`` whose record key was refused (``RecordKeyError``)."""
    return SummaryFailure(
        app_name=command.app_name,
        user_id=command.user_id,
        session_id=command.session_id,
        filter_key=command.filter_key if isinstance(command, SummarizeSync) else "",
        job_id=f"command:{command.command_id}",
        reply_to=command.reply_to,
        error_class=RECORD_KEY_ERROR,
        reason=reason,
        created_at=at,
    )


class TrackHandler:
    """Per-record logic of the track agent (see the module docstring)."""

    def __init__(
        self,
        policies: PolicySet,
        *,
        accept: Callable[[SessionKey], bool] | None = None,
        job_origin: str | None = None,
        dead_letter_limit: int = DEAD_LETTER_VALUE_LIMIT,
        optimistic: bool = False,
        wall_clock: Callable[[], float] = time.time,
        digests: FirstDigests | None = None,
    ) -> None:
        """``digests``: the memory of each session's event ids (``schemas.event_ids``), whose rule refuses an
        id published again with other content (``None``: no such rule, for callers that judge it elsewhere)."""
        self.digests = digests
        self.wall_clock = wall_clock
        self.dead_letter_limit = dead_letter_limit
        self.optimistic = optimistic
        self.policies = policies
        self.accept = accept
        self.job_origin = job_origin

    def on_record(
        self,
        record: EventTopicRecord | Rejected,
        coords: Coordinates,
        store: StateStore,
        *,
        key: bytes | _Canonical | None = CANONICAL_KEY,
        log_time: datetime | None = None,
        raw: bytes | None = None,
    ) -> TrackOutput:
        """Dispatch one events-topic record whose Kafka record key is ``key``.

        ``key`` defaults to the record's canonical ``SessionKey.kafka_key()`` (callers that
        build records themselves); the worker passes the record's actual key. A key the
        rule of :mod:`streams.rules.record_keys` refuses dead-letters the record (``raw``:
        its bytes as read, else the record serialized again).
        """
        if self.digests is not None:
            self.digests.follow(coords.partition, coords.offset)
        if isinstance(record, Rejected):
            return TrackOutput(
                dead_letter=dead_letter_for(
                    record.raw,
                    None if isinstance(key, _Canonical) else key,
                    coords,
                    record.error_class,
                    record.reason,
                    "track",
                    self.dead_letter_limit,
                )
            )
        if self.accept is not None and not self.accept(record.session_key):
            return TrackOutput()
        sk = record.session_key
        canonical = sk.kafka_key()
        record_key: bytes | None = canonical if isinstance(key, _Canonical) else key
        full = self._load(store, sk, FULL_SESSION)
        problem = key_problem(
            record_key, sk, canonical, known=full is not None, known_key=full.record_key if full else None,
            known_partition=full.partition if full else None, partition=coords.partition,
        )  # fmt: skip
        if problem is not None:
            value = raw if raw is not None else record.model_dump_json().encode()
            out = TrackOutput(
                dead_letter=dead_letter_for(
                    value, record_key, coords, RECORD_KEY_ERROR, problem, "track", self.dead_letter_limit
                )
            )
            if isinstance(record, SummarizeSync | AdoptEpoch) and record.reply_to:  # its caller waits for an answer
                out.replies.append(key_refused(record, problem, log_time or datetime.now(UTC)))
            return out
        kept = None if record_key == canonical else record_key  # the state keeps a canonical key as None
        if isinstance(record, SessionEvent):
            value = raw if raw is not None else record.model_dump_json().encode()
            reused = self._reused(record, value, sk, coords, full) if self.digests is not None else None
            if reused is not None:
                return TrackOutput(
                    dead_letter=dead_letter_for(
                        value, record_key, coords, EVENT_ID_REUSED, reused, "track", self.dead_letter_limit
                    )
                )
            return with_events_key(self._on_event(record, sk, coords, store, kept, full), kept)
        if isinstance(record, DeleteSession):
            self._on_delete(record, store, coords.offset)
            if self.digests is not None:
                # Delivered again too: what the memory learnt of the session may be of the records after it.
                self.digests.forget(coords.partition, sk)
            return TrackOutput()
        if isinstance(record, AdoptEpoch):
            # A replay builds an epoch; only the live line switches (the summaries topic records it).
            return TrackOutput() if self.job_origin == "replay" else TrackOutput(adoptions=[record])
        out = self._on_command(record, coords, store, log_time or datetime.now(UTC), kept)
        if full is None and store.get(table_key(*sk, FULL_SESSION)) is None:
            # The command decided nothing for the session (a key the allowlist refuses, a sweep): it still fixes
            # the session's key, as the projector, which knows no policy, takes it to (schemas.record_keys).
            store[table_key(*sk, FULL_SESSION)] = tracked_key(new_state(*sk, FULL_SESSION), None, coords.partition,
                                                              None, kept)  # fmt: skip
        return with_events_key(out, kept)

    def unknown_before(self, partition: int, offset: int, sk: SessionKey, full: TrackedKey | None) -> int | None:
        """Where the session's log starts when the memory must learn it before the record at ``offset`` is
        judged (its records from there up to ``offset``), else ``None`` — it is known, or has no record
        before (a session it then remembers as empty). ``full``: the session's full-session entry."""
        digests = self.digests
        if digests is None or digests.knows(partition, sk):
            return None
        first = full.first_offset if full is not None else None
        if first is None or first >= offset:  # a new session, or none of its events since its deletion
            digests.learn(partition, sk, {})
            return None
        return first

    def _reused(
        self, event: SessionEvent, raw: bytes, sk: SessionKey, coords: Coordinates, full: TrackedKey | None
    ) -> str | None:
        """Why ``event`` (``raw``: its record's bytes) is refused for reusing an event id with other content
        (``schemas.event_ids``)."""
        digests = self.digests
        assert digests is not None
        digest = record_digest(raw)
        try:
            return digests.judge(coords.partition, sk, event.event_id, digest)
        except KeyError:  # not known (per event, the exception is rare: the session's first record in the process)
            pass
        if self.unknown_before(coords.partition, coords.offset, sk, full) is not None:
            # Not learnt (the caller reads it before the batch: see streams.app.event_ids): judged as new.
            fields = {**coords.log_fields(), "app_name": sk.app_name, "session_id": sk.session_id}
            log.warning("event ids of a session not known: record not judged for a reused event id", extra=fields)
            return None
        return digests.judge(coords.partition, sk, event.event_id, digest)

    def _load(self, store: StateStore, sk: SessionKey, filter_key: str) -> TrackedKey | None:
        return store.get(table_key(*sk, filter_key))

    def _on_event(
        self,
        event: SessionEvent,
        sk: SessionKey,
        coords: Coordinates,
        store: StateStore,
        record_key: bytes | None,
        full: TrackedKey | None,
    ) -> TrackOutput:
        """``sk``: the event's session; ``full``: its full-session entry, as :meth:`on_record` just loaded it."""
        policy = self.policies.for_app(event.app_name)
        states: dict[str, SessionTriggerState | None] = {FULL_SESSION: full.state if full else None}
        for k in affected_keys(event, policy, full.state if full else None):
            if k != FULL_SESSION:
                found = self._load(store, sk, k)
                states[k] = found.state if found else None
        outcome = apply_event(event, policy, states, offset=coords.offset)
        first = full.first_offset if full is not None and full.first_offset is not None else coords.offset
        return self._write(outcome, store, first, partition=coords.partition, record_key=record_key)

    def _on_command(
        self,
        command: Summarize | SummarizeSync,
        coords: Coordinates,
        store: StateStore,
        at: datetime,
        record_key: bytes | None = None,
    ) -> TrackOutput:
        policy = self.policies.for_app(command.app_name)
        sk = command.session_key
        full = self._load(store, sk, FULL_SESSION)
        origin = (command.model_extra or {}).get("origin") if isinstance(command, Summarize) else None
        states: dict[str, SessionTriggerState | None] = {FULL_SESSION: full.state if full else None}
        for target in command_targets(command, policy):
            found = self._load(store, sk, target)
            states[target] = found.state if found else None
        if full is not None and already_applied(full.state, coords.offset):
            # Delivered again, after events that came later: decided when it first came. Deciding
            # now would judge those later events by it (a boundary a replay of the log never makes).
            again = apply_command_again(command, policy, states, at=at)
            out = TrackOutput(jobs=list(again.joins))
            if isinstance(command, SummarizeSync) and not again.joins:
                out.replies.append(nothing_to_summarize(command, again, policy, at, states))
            return out
        if origin in ("idle_sweep", "retry") and not self._sweep_applies(origin, states, command, policy, at):
            return TrackOutput()
        if origin == "retry":
            # The job is emitted again as it was: a sweep's poke never moves the decided boundary.
            outcome = resend(states.get(command.filter_key), at)
            return self._write(outcome, store, full.first_offset if full is not None else None, origin=origin,
                               partition=coords.partition, record_key=record_key)  # fmt: skip
        if origin is not None:
            command = command.model_copy(update={"force": True})
            policy = replace(policy, cascade_full_session=False)
        outcome = apply_command(command, policy, states, at=at)
        first = full.first_offset if full is not None else None
        out = self._write(outcome, store, first, origin=origin, partition=coords.partition, record_key=record_key)
        if isinstance(command, SummarizeSync) and not outcome.jobs and not outcome.joins:
            out.replies.append(nothing_to_summarize(command, outcome, policy, at, states))
        return out

    @staticmethod
    def _sweep_applies(
        origin: str,
        states: dict[str, SessionTriggerState | None],
        command: Summarize | SummarizeSync,
        policy: SummaryPolicy,
        at: datetime,
    ) -> bool:
        state = states.get(command.filter_key)
        if state is None:
            return False
        if origin == "idle_sweep":
            # A key cooling down after failed jobs is not swept (the sweep forces its job). Whether
            # the key's earlier jobs are answered does not matter: the sweep's command is in the
            # log, and a replay must take the same decision on it.
            return (
                len(state.pending) > state.skip and state.content > 0 and not cooling_down(state, policy, to_micros(at))
            )
        return state.in_flight is not None

    def _write(
        self,
        outcome: Outcome,
        store: StateStore,
        first_offset: int | None,
        origin: str | None = None,
        partition: int | None = None,
        record_key: bytes | None = None,
    ) -> TrackOutput:
        if self.optimistic:
            outcome = assume_done(outcome)
        jobs_decided = outcome.jobs
        fired = {job.filter_key for job in jobs_decided} if jobs_decided else ()
        now = self.wall_clock() if fired else None
        for key, state in outcome.states.items():
            tkey = table_key(state.app_name, state.user_id, state.session_id, key)
            wall = now if key in fired else None
            if wall is None and state.in_flight is not None:
                before = store.get(tkey)
                wall = before.emitted_wall if before is not None else None
            store[tkey] = tracked_key(state, first_offset if key == FULL_SESSION else None, partition, wall, record_key)
        if not jobs_decided and not outcome.joins:  # most records
            return TrackOutput()
        jobs = [self._finish_job(job, outcome, first_offset, origin) for job in jobs_decided]
        # A join job reads no events and is nobody's retry or replay job: sent as decided.
        return TrackOutput(jobs=[*jobs, *outcome.joins])

    def _finish_job(
        self, job: SummaryJob, outcome: Outcome, first_offset: int | None, origin: str | None
    ) -> SummaryJob:
        state = outcome.states.get(job.filter_key)
        update: dict[str, object] = {"events_from_offset": first_offset}
        if job.upto.offset is None and state is not None and state.high_offset is not None:
            update["upto"] = job.upto.model_copy(update={"offset": state.high_offset})
        if origin == "idle_sweep":
            update["origin"] = "idle_sweep"
            update["force"] = False
            update["trigger"] = job.trigger.model_copy(update={"name": "idle_sweep"})
        elif origin == "retry":
            update["origin"] = "retry"
        elif self.job_origin == "replay":
            update["origin"] = "replay"
        return copy_with(job, update)

    def _on_delete(self, command: DeleteSession, store: StateStore, offset: int) -> None:
        """Drop the session's state; keep each key's version so later summaries keep growing."""
        policy = self.policies.for_app(command.app_name)
        sk = command.session_key
        full = self._load(store, sk, FULL_SESSION)
        if full is not None and already_applied(full.state, offset):
            return  # delivered again: the events after it are the session's since then
        for k in session_keys(full.state if full else None, policy):
            found = self._load(store, sk, k)
            if found is None:
                continue
            old = found.state
            # What orders the key's records survives: its version, the offsets it has folded and
            # answered, and its epoch switch (records delivered again stay ignored).
            # The deletion's offset: a summary of the history before it, answered after it, moves no boundary.
            fresh = replace(new_state(*sk, k), version=old.version, high_offset=old.high_offset,
                            answered_at=old.answered_at, adopted_at=old.adopted_at, deleted_at=offset)  # fmt: skip
            store[table_key(*sk, k)] = TrackedKey(fresh, None, found.partition, None, found.record_key)

    def on_summary_record(self, record: SummaryRecord, store: StateStore, offset: int | None = None) -> None:
        """Advance the key's boundary (summary), release its in-flight job (failure) or switch the
        session's keys to another epoch; ``offset``: where the record is on the summaries topic.

        A reply (``SummaryReply``) names a summary already applied: nothing to do.
        """
        if isinstance(record, EpochAdopted):
            self._on_adoption(record, store, offset)
            return
        if isinstance(record, SummaryReply):
            return
        key = table_key(record.app_name, record.user_id, record.session_id, record.filter_key)
        found = store.get(key)
        if found is None:
            return
        if isinstance(record, SessionSummary):
            state = on_summary(found.state, record, offset)
        else:
            # A job decided before the session's deletion failed: it gives no range back (the queue it was
            # in is gone) and starts no cooldown of the history since, which re-imported events with
            # timestamps before the failure would never have left.
            gave_up = record.gave_up and not before_deletion(found.state, record.events_from_offset)
            state = on_job_failed(found.state, record.job_id, gave_up=gave_up,
                                  at=to_micros(record.created_at), window=record.context_window,
                                  offset=offset)  # fmt: skip
        if state is not found.state:  # one per answered job: ``replace`` runs the dataclass's ``__init__``
            # The emission time is the in-flight job's timeout clock: none once every job is answered.
            wall = found.emitted_wall if state.in_flight is not None else None
            store[key] = tracked_key(state, found.first_offset, found.partition, wall, found.record_key)

    def _on_adoption(self, record: EpochAdopted, store: StateStore, offset: int | None) -> None:
        """Every key of the session follows the adopted epoch's head (``on_adoption``)."""
        sk = record.session_key
        heads = {h.summary.filter_key: h.summary for h in record.heads}
        full = self._load(store, sk, FULL_SESSION)
        policy = self.policies.for_app(record.app_name)
        keys = {*session_keys(full.state if full else None, policy), *heads, *(h.summary.filter_key
                                                                              for h in record.replaced)}  # fmt: skip
        for k in sorted(keys):
            found = self._load(store, sk, k)
            if found is None:
                continue
            # Without the offset (records replayed in memory), one past the last switch keeps it idempotent.
            at = offset if offset is not None else (found.state.adopted_at or -1) + 1
            state = on_adoption(found.state, heads.get(k), at)
            if state is not found.state:
                store[table_key(*sk, k)] = replace(found, state=state)


def resend(state: SessionTriggerState | None, at: datetime) -> Outcome:
    """The key's oldest unanswered job emitted again (a sweep's ``retry`` poke), if it has one."""
    if state is None or state.in_flight is None:
        return Outcome()
    head = state.in_flight
    job = resend_job(state, head, created_at=at)
    if job is None:
        return Outcome()
    flight = flight_for(job, to_micros(at), state)
    return Outcome({state.filter_key: record_decision(state.copy(), flight)}, (), (job,))


def with_events_key(out: TrackOutput, record_key: bytes | None) -> TrackOutput:
    """``out`` with its jobs carrying the session's record key (``None``: canonical, left out)."""
    if record_key is not None and out.jobs:
        b64 = encode_key(record_key)
        out.jobs = [job.model_copy(update={"events_key_b64": b64}) for job in out.jobs]
    return out


def assume_done(outcome: Outcome) -> Outcome:
    """Treat every emitted job as already summarized up to its target (``optimistic``).

    No longer needed for determinism (decisions count after the decided boundary
    whatever the answers; the worker's replay keeps the real queue, so its
    timed-out jobs are re-emitted): it gives the same jobs, and is kept for tests
    that want no queue.
    """
    states = dict(outcome.states)
    for job in outcome.jobs:
        state = states.get(job.filter_key)
        if state is None:
            continue
        boundary = SummaryBoundary(
            cutoff_at=job.upto.cutoff_at, last_event_id=job.upto.last_event_id, version=job.from_version + 1
        )
        remaining = tuple(
            delta_after(state.pending, boundary.last_event_id, boundary.cutoff_at,
                        id_of=lambda p: p.event_id, micros_of=lambda p: p.ts)
        )  # fmt: skip
        states[job.filter_key] = rebase(state, remaining, boundary, job.from_version + 1, job.job_id)
    return Outcome(states, outcome.decisions, outcome.jobs, outcome.joins)
