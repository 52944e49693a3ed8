"""What the track agent calls: which states an event touches, and which jobs to emit.

Per event::

    full = table[(session, "")]                        # may be None
    keys = affected_keys(event, policy, full)
    states = {k: table.get((session, k)) for k in keys}
    outcome = apply_event(event, policy, states, offset=offset)
    for key, state in outcome.states.items(): table[(session, key)] = state
    for job in outcome.jobs: await jobs_topic.send(key=..., value=job)

On a ``SessionSummary``: ``table[(session, key)] = on_summary(state, summary, offset)`` (an answer at or
before the key's ``answered_at`` changes nothing).
All functions here are pure; job ids and timestamps come from the records.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from schemas import (
    SCHEMA_VERSION,
    JobBoundary,
    SessionEvent,
    Summarize,
    SummarizeSync,
    SummaryBoundary,
    SummaryJob,
    TriggerReport,
)
from schemas.base import construct
from streams.rules.boundaries import BOUNDARY_FORMAT_VERSION, from_micros, to_micros
from streams.rules.errors import InvalidDecisionError
from streams.rules.event_facts import EventFacts, event_facts
from streams.rules.filter_keys import FULL_SESSION, ancestors
from streams.rules.joins import join_job
from streams.rules.policy import SummaryPolicy
from streams.rules.trigger_state import (
    InFlight,
    SessionTriggerState,
    TriggerDecision,
    already_applied,
    decide,
    evolve,
    new_state,
    record_decision,
    seed_branch_state,
)

States = Mapping[str, SessionTriggerState | None]
_FULL_ONLY = (FULL_SESSION,)
_NO_SCOPES: Mapping[str, object] = {}
Origin = Literal["trigger", "command", "idle_sweep", "retry", "replay"]


@dataclass(slots=True)
class Outcome:
    """States to write back (by filter key), every decision taken, jobs to emit.

    Not frozen, though nothing changes one once built: one is made per event, and a frozen
    dataclass's ``__init__`` (``object.__setattr__`` per field) cost five times as much.

    ``joins``: the ``join`` jobs of sync requests that decided no job of their own
    (see :func:`join_job`); emitted like jobs, they are not in any key's queue.
    """

    states: dict[str, SessionTriggerState] = field(default_factory=dict)
    decisions: tuple[TriggerDecision, ...] = ()
    jobs: tuple[SummaryJob, ...] = ()
    joins: tuple[SummaryJob, ...] = ()


def affected_keys(
    event: SessionEvent | EventFacts, policy: SummaryPolicy, full: SessionTriggerState | None
) -> tuple[str, ...]:
    """The filter keys whose state ``event`` changes, ``""`` first.

    The full session always; the event's own key if the allowlist allows it;
    and every allowed branch key already known in the session (from ``full``)
    whose summary input holds the event: its ancestors, or all of them for a
    keyless event.
    """
    key = event.entry.filter_key if isinstance(event, EventFacts) else event.filter_key
    open_to_all = policy.allowlist is None
    if not key:
        if full is None or not full.scopes:
            return _FULL_ONLY
        if open_to_all:
            return (FULL_SESSION, *full.scopes)
        return (FULL_SESSION, *[k for k in full.scopes if policy.allows(k)])
    lineage = ancestors(key)
    branches: tuple[str, ...]
    if len(lineage) == 1:
        branches = lineage
    else:
        known = full.scopes if full is not None else _NO_SCOPES
        branches = tuple(k for k in lineage if k == key or k in known)
    if not open_to_all:
        branches = tuple(k for k in branches if policy.allows(k))
    return (FULL_SESSION, *branches)


def _state(states: States, key: str, full: SessionTriggerState) -> SessionTriggerState:
    if key == FULL_SESSION:
        return full
    found = states.get(key)
    return found if found is not None else seed_branch_state(full, key)


def flight_for(job: SummaryJob, at: int, state: SessionTriggerState) -> InFlight:
    """The queue entry of ``job``, emitted at ``at`` (µs) for ``state``'s key.

    It keeps the offset the job reads to: its ``upto.offset``, or — left for the caller to
    fill, as the track use case does — the state's latest record. A re-emission reads as far.
    """
    upto_offset = job.upto.offset if job.upto.offset is not None else state.high_offset
    return InFlight(job.job_id, job.upto.last_event_id, at, job.attempt, job.context or None, upto_offset)


def apply_event(
    event: SessionEvent,
    policy: SummaryPolicy,
    states: States,
    *,
    offset: int | None = None,
    facts: EventFacts | None = None,
) -> Outcome:
    """Fold ``event`` into the states of :func:`affected_keys` and decide its targets.

    ``states`` maps those keys to their stored state (``None``/absent: new). New
    branch states are seeded from the full-session state. A fired target gets a
    job, queued for its key (its target becomes the decided boundary); a target
    whose oldest unanswered job timed out (event time) and that does not fire
    gets that very job again (``origin="retry"``, same id and target). A record
    a state has folded already (``offset`` at or below its ``high_offset``: a
    delivery again after a restart or a rebalance) leaves it unchanged and
    decides nothing for it.

    The given states are evolved **in place** (see ``evolve``): ``Outcome.states``
    holds those same objects (plus the new ones), to be written back.
    """
    facts = facts or event_facts(event, policy.counter, offset, policy.important_keywords)
    full = states.get(FULL_SESSION) or new_state(event.app_name, event.user_id, event.session_id)
    # Every state is looked up (new branches seeded from ``full``) before any is
    # evolved: evolving mutates, and a seed must not see the event already.
    keys = affected_keys(facts, policy, full)
    # A record delivered again (a restart resumes from the last commit, which may trail the
    # changelog) decides nothing: its decision was taken when it first came, and taking one
    # now would judge the state of later events by this older one (a boundary moved).
    delivered: Collection[str]
    if keys is _FULL_ONLY:  # most events: the full session's state alone, no comprehension run
        updated = {FULL_SESSION: full}
        delivered = _FULL_ONLY if already_applied(full, facts.offset) else ()
    else:
        updated = {k: _state(states, k, full) for k in keys}
        delivered = {k for k, state in updated.items() if already_applied(state, facts.offset)}
    for state in updated.values():
        evolve(state, facts)
    if not (facts.counted and facts.model_output):
        return Outcome(updated)
    decisions: list[TriggerDecision] = []
    jobs: list[SummaryJob] = []
    trigger_key = facts.entry.filter_key
    for target in policy.targets(trigger_key):
        if target in delivered or (target not in updated and FULL_SESSION in delivered):
            continue
        state = updated.get(target) or _state(states, target, full)
        decision = decide(state, policy, facts, trigger_key=trigger_key, context=event.context)
        decisions.append(decision)
        job: SummaryJob | None = None
        if decision.fire:
            # A new job (its range covers the timed-out one's, which it answers): not a retry.
            job = build_job(
                state,
                decision._replace(retry_of=None) if decision.retry_of is not None else decision,
                created_at=event.timestamp,
                offset=offset if decision.upto and decision.upto.event_id == event.event_id else None,
                context=event.context,
            )
        elif decision.retry_of is not None:
            job = resend_job(state, decision.retry_of, created_at=event.timestamp)
        if job is None:
            continue
        jobs.append(job)
        flight = flight_for(job, facts.entry.ts, state)
        if target in updated:  # already this call's to change
            record_decision(state, flight)
        else:
            updated[target] = record_decision(state.copy(), flight)
    return Outcome(updated, tuple(decisions), tuple(jobs))


def command_targets(command: Summarize | SummarizeSync, policy: SummaryPolicy) -> tuple[str, ...]:
    """The keys ``command`` summarizes (the states the caller loads for it).

    ``summarize`` is the guide's ``EnqueueSummaryJob``: its worker cascades, so
    the targets are ``policy.targets`` (the key if the allowlist allows it, then
    ``""`` if the cascade is on). ``summarize_sync`` is ``CreateSessionSummary``:
    exactly its key, never the cascade, and nothing when the allowlist refuses
    the key (a no-op in Go). One job then answers its ``reply_to``.
    """
    key = command.filter_key
    if isinstance(command, SummarizeSync):
        return (key,) if policy.allows(key) else ()
    return policy.targets(key)


def apply_command(
    command: Summarize | SummarizeSync,
    policy: SummaryPolicy,
    states: States,
    *,
    at: datetime,
) -> Outcome:
    """Decide a ``summarize`` / ``summarize_sync`` command for its :func:`command_targets`.

    ``at`` is the command record's log timestamp (it becomes the job's
    ``created_at``, keeping replay deterministic). ``force`` skips the checks but
    never an empty delta. A sync command whose decision does not fire makes no
    job of its own: it joins the key's decided boundary instead (``Outcome.joins``,
    see :func:`join_job`) — the job in flight, or the summary that already covers
    its events — or, when the key has neither, gets a non-firing decision the
    caller answers with a failure record. A sync command on a key the allowlist
    refuses gets one decision ``not_allowed`` and changes no state.

    A ``summarize_sync`` never cascades, so the ``model_request`` it may carry
    (forked for cache-safe summarizing) only ever answers its own key: the Go
    guide's cache-safe skip of the cascaded full-session target has nothing to
    skip here.
    """
    full = states.get(FULL_SESSION) or new_state(command.app_name, command.user_id, command.session_id)
    updated: dict[str, SessionTriggerState] = {}
    decisions: list[TriggerDecision] = []
    jobs: list[SummaryJob] = []
    joins: list[SummaryJob] = []
    sync = command if isinstance(command, SummarizeSync) else None
    targets = command_targets(command, policy)
    if sync is not None and not targets:
        decisions.append(TriggerDecision(False, command.filter_key, command.filter_key, "not_allowed"))
    for target in targets:
        state = _state(states, target, full)
        decision = decide(
            state, policy, None, trigger_key=command.filter_key, force=command.force, context=command.context
        )
        decisions.append(decision)
        if decision.fire:
            # A new job (its range covers the timed-out one's, which it answers): not a retry.
            job = build_job(
                state,
                decision._replace(retry_of=None) if decision.retry_of is not None else decision,
                created_at=at,
                origin="command",
                reply_to=sync.reply_to if sync is not None else None,
                model_request=sync.model_request if sync is not None else None,
                context=command.context,
            )
            jobs.append(job)
            updated[target] = record_decision(state.copy(), flight_for(job, to_micros(at), state))
            continue
        if sync is not None:
            join = join_job(state, sync, decision, created_at=at)
            if join is not None:
                joins.append(join)
        if states.get(target) is None:
            updated[target] = state
    return Outcome(updated, tuple(decisions), tuple(jobs), tuple(joins))


def apply_command_again(
    command: Summarize | SummarizeSync, policy: SummaryPolicy, states: States, *, at: datetime
) -> Outcome:
    """A command delivered again (see :func:`already_applied`): no job, no state change.

    Its decision was taken when it first came, before the events the states now hold. A
    ``summarize_sync`` joins each of its keys' decided boundary once more (``Outcome.joins``):
    should its first answer have been lost with the worker that decided it, the caller still
    gets one; a join reads no events and moves no boundary. With nothing to join, the caller
    answers it as it did the first time (nothing to summarize; a duplicate answer is harmless).
    """
    if not isinstance(command, SummarizeSync):
        return Outcome({})
    full = states.get(FULL_SESSION) or new_state(command.app_name, command.user_id, command.session_id)
    joins = []
    decisions = []
    for target in command_targets(command, policy):
        decision = TriggerDecision(False, target, command.filter_key, "delivered_again")
        decisions.append(decision)
        join = join_job(_state(states, target, full), command, decision, created_at=at)
        if join is not None:
            joins.append(join)
    return Outcome({}, tuple(decisions), joins=tuple(joins))


def session_keys(full: SessionTriggerState | None, policy: SummaryPolicy) -> tuple[str, ...]:
    """Every key that may hold state for the session (for ``delete_session``)."""
    if full is None:
        return (FULL_SESSION,)
    return (FULL_SESSION, *(k for k in full.scopes if policy.allows(k)))


def job_id_for(state: SessionTriggerState, upto_event_id: str) -> str:
    """Deterministic: session, key, the boundary decided before it and its target.

    Not the applied version: that depends on how fast the previous summaries
    came back, and a replay must name the same jobs as the live run.
    """
    before = state.decided_id if state.decided_id is not None else f"v{state.version}"
    raw = "\x1f".join((state.app_name, state.user_id, state.session_id, state.filter_key, before, upto_event_id))
    return hashlib.sha256(raw.encode()).hexdigest()[:32]


def resend_job(
    state: SessionTriggerState, job: InFlight, *, created_at: datetime, origin: Origin = "retry"
) -> SummaryJob | None:
    """The unanswered ``job`` emitted again (same id and target, next attempt), or ``None``
    when its target left the pending index (a summary covered it)."""
    upto = next((p for p in reversed(state.pending) if p.event_id == job.upto_event_id), None)
    if upto is None:
        return None
    report = TriggerReport(name="force", detail=f"retry: attempt {job.attempt + 1} of job {job.job_id}")
    decision = TriggerDecision(True, state.filter_key, state.filter_key, "retry", report, (), upto, False, job)
    return build_job(
        state, decision, created_at=created_at, origin=origin, context=job.context, job_id=job.job_id,
        offset=job.upto_offset,  # as far as the job first read (None: an older row; the caller's default)
    )  # fmt: skip


def build_job(
    state: SessionTriggerState,
    decision: TriggerDecision,
    *,
    created_at: datetime,
    offset: int | None = None,
    origin: Origin = "trigger",
    reply_to: str | None = None,
    model_request: dict[str, object] | None = None,
    context: Mapping[str, str] | None = None,
    job_id: str | None = None,
) -> SummaryJob:
    """The ``SummaryJob`` for a fired decision on ``state``; ``context``: the triggering record's markers."""
    if not decision.fire or decision.upto is None or decision.report is None:
        raise InvalidDecisionError(
            f"only a fired decision with a pending event makes a job "
            f"(key {decision.filter_key!r}: reason {decision.reason!r}, upto {decision.upto is not None})"
        )
    upto = decision.upto
    retry = decision.retry_of
    scope = state.scope_for(decision.trigger_key)
    report = decision.report
    cascaded = state.filter_key == FULL_SESSION and decision.trigger_key != FULL_SESSION
    if cascaded:
        report = report.model_copy(update={"detail": f"trigger_key={decision.trigger_key}"})
    # ``version`` is the boundary format version (the summary version is ``from_version``).
    previous = (
        None
        if state.boundary_ts is None
        else construct(
            SummaryBoundary,
            cutoff_at=from_micros(state.boundary_ts),
            last_event_id=state.boundary_event_id,
            version=BOUNDARY_FORMAT_VERSION,
        )
    )
    # Every field is built here from validated records, so validation is skipped (this runs
    # on the hot path of the track agent); ``construct``: the fields in their declared order.
    return construct(
        SummaryJob,
        schema_version=SCHEMA_VERSION,
        job_id=job_id or job_id_for(state, upto.event_id),
        app_name=state.app_name,
        user_id=state.user_id,
        session_id=state.session_id,
        filter_key=state.filter_key,
        cascade_full_session=cascaded,
        from_version=state.version,
        previous_boundary=previous,
        upto=construct(JobBoundary, last_event_id=upto.event_id, cutoff_at=from_micros(upto.ts), offset=offset),
        trigger=report,
        force=decision.force,
        origin="retry" if retry is not None and origin == "trigger" else origin,
        reply_to=reply_to,
        model_request=model_request,
        context_window=scope.activity.context_window,
        model_hint=scope.activity.model,
        summary_context_window=state.learned_window,
        attempt=retry.attempt + 1 if retry is not None else 0,
        created_at=created_at,
        context=dict(context) if context else {},
    )
