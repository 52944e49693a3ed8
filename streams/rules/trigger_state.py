"""The trigger fold: ``SessionTriggerState`` per ``(session, filter key)``.

Contracts (the track agent relies on them):

* ``state = evolve(state, event)`` folds one event of the session (in log order)
  into the state of one key **in place** and returns that same object (O(1) per
  event: the pending index is a list that grows, the counters are updated where
  they are). Events outside the key's summary input, partial and
  ``skip_summarization`` events leave it unchanged. With ``offset`` given, an
  already-applied offset is ignored, so redelivery is harmless. Keep a snapshot
  with ``state.copy()`` when the state before the event is still needed.
* ``decide(state, policy, event)`` is pure: the same state, policy and event give
  the same decision. It reads event timestamps, never the wall clock. It does not
  change the state; the caller records an emitted job with ``mark_emitted``.
* Decisions are taken against the **decided boundary** — the target of the last
  job emitted for the key — never against the last *applied* summary: the
  counters, ``content`` and the held-back rule see only ``pending[skip:]``, the
  events after that boundary. A job in flight does not hold the next decision
  back: the key's jobs queue (``in_flight``, then ``queued``) and the summarize
  side runs them one at a time in order, each rebased on the summary before it.
  So the boundaries are a pure function of the event log (and the failures),
  whatever the LLM latency: a live run and a replay with instant summaries decide
  the same jobs.
* ``state = on_summary(state, summary)`` advances the applied boundary to the
  summary's (the pending index keeps what lies after it, held-back events
  included) and answers the queued jobs up to the summary's. The decided view
  does not move. Stale or duplicate summaries (``version`` not above the
  state's) are ignored, so replay is idempotent; so is any answer (summary or
  failure) read at a summaries-topic offset at or before ``answered_at``. A
  summary of history a ``delete_session`` deleted (its chain began before the
  deletion: :func:`of_deleted_history`) moves no boundary; only its version is kept.
* ``state = on_job_failed(state, job_id, gave_up=..., at=..., window=..., offset=...)``
  releases the job from the key's queue. A job *given up* (not a sync command
  that had nothing to do) gives its range back: the decided boundary returns to
  the previous unanswered job's target (or, with none, to the applied boundary),
  so the failed range is decided again. It also counts a failure in a row,
  anchored at the latest
  event time the state has seen: ``decide`` then answers ``cooling_down`` until
  an event at least ``policy.cooldown_us(failures)`` later (exponential,
  capped); the first job after that is the half-open retry, and no other job
  is decided while it is unanswered (failures are the one input that is not in
  the log: only then do decisions wait for answers); a summary resets the
  count. A window a context-length refusal named is kept
  (``learned_window``) and every next job of the key carries it.
* ``on_summary``, ``on_job_failed`` and ``mark_emitted`` are copy-on-write: they
  return a new state when something changes and the very same object when
  nothing does (callers may test ``new is not old`` to skip a write), and never
  modify their argument.

The state holds counts and an index of pending events (ids, timestamps, token
counts, filter keys, flags) — never message content. The full-session state
(``filter_key == ""``) also keeps, per branch key that has triggered in the
session, the counters of the full delta *scoped to that branch*: a full-session
target cascaded from a branch is checked on the branch's share of the full
delta (the Go behaviour), while the full session's own counters count only
keyless events and events keyed exactly ``app_name``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from schemas import SessionEvent, SessionSummary, SummaryBoundary, TriggerReport
from streams.rules.boundaries import BOUNDARY_FORMAT_VERSION, delta_after, from_micros, to_micros
from streams.rules.checks import CheckOutcome, TriggerView, evaluate_all, preferred_outcome
from streams.rules.counters import F_CONTENT, Activity, Counters, PendingEvent
from streams.rules.errors import CorruptTriggerStateError
from streams.rules.event_facts import EventFacts, event_facts
from streams.rules.filter_keys import FULL_SESSION, SEPARATOR, ancestors, counts_toward, in_subtree
from streams.rules.held_back import (
    all_held_back,
    all_held_back_after_decision,
    held_back_prefix,
    without_held_back,
)
from streams.rules.policy import SummaryPolicy

STATE_FORMAT = 1


@dataclass(slots=True)
class Scope:
    """Counters and activity of one scope (mutable; see :meth:`copy`)."""

    counters: Counters = field(default_factory=Counters)
    activity: Activity = field(default_factory=Activity)

    def copy(self) -> Scope:
        return Scope(self.counters.copy(), self.activity.copy())


class Failed(NamedTuple):
    """Jobs of this key given up in a row, and the event time (µs) the last one was taken at."""

    failures: int
    at: int | None


class InFlight(NamedTuple):
    """The job emitted for this key and not answered yet."""

    job_id: str
    upto_event_id: str
    emitted_at: int
    """Timestamp (µs) of the event that emitted it."""
    attempt: int = 0
    context: Mapping[str, str] | None = None
    """The request context the job carries (``None``: none): a retry of the job carries it again."""
    upto_offset: int | None = None
    """The events-topic offset the job reads up to (``None``: not known, a row written before it was
    kept): a re-emission reads exactly as far, never to the events that came since."""


def flight_in(row: Any) -> InFlight:
    """Read :func:`flight_row` back; a wrong type raises ``TypeError`` (the callers name the part)."""
    flight = InFlight(*row)
    for name, value in (("emitted_at", flight.emitted_at), ("attempt", flight.attempt)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    offset_in(flight.upto_offset)
    return flight


def flight_row(flight: InFlight) -> list[Any]:
    """An in-flight or queued job as the changelog writes it: the fields it has, trailing empty ones left out."""
    if flight.upto_offset is not None:
        return list(flight)
    return list(flight) if flight.context else list(flight[:4])


@dataclass(slots=True)
class SessionTriggerState:
    """Trigger state of one ``(session, filter key)``; see the module contracts.

    Mutable: :func:`evolve` appends to ``pending`` and updates the counters in
    place (O(1) per event). :meth:`copy` gives an independent snapshot;
    ``dataclasses.replace`` alone does not (it shares ``pending`` and the scopes).
    """

    app_name: str
    user_id: str
    session_id: str
    filter_key: str = FULL_SESSION
    version: int = 0
    """Version of the last summary applied (0: none yet)."""
    boundary_event_id: str | None = None
    boundary_ts: int | None = None
    pending: list[PendingEvent] = field(default_factory=list)
    """The pending-event index, in log order (append-only between boundaries)."""
    content: int = 0
    """Pending events with summarizable text."""
    own: Scope = field(default_factory=Scope)
    scopes: dict[str, Scope] = field(default_factory=dict)
    """Full-session state only: the full delta scoped to each triggering branch key."""
    in_flight: InFlight | None = None
    high_offset: int | None = None
    failed: Failed | None = None
    """Given-up jobs in a row (``None``: the last job did not fail): the cooldown."""
    learned_window: int | None = None
    """The summary model's window as a context-length refusal named it: the next budget."""
    queued: tuple[InFlight, ...] = ()
    """Jobs decided after ``in_flight`` and not answered yet, oldest first."""
    decided_id: str | None = None
    """Target event of the last decided job (``None``: none since the last reset or given-up job)."""
    skip: int = 0
    """Leading ``pending`` entries at or before the decided boundary (derived from ``decided_id``)."""
    adopted_at: int | None = None
    """Summaries-topic offset of the last epoch switch applied (``schemas.epochs``): the records
    before it belong to the line the session left, and are ignored when delivered again."""
    answered_at: int | None = None
    """Summaries-topic offset of the last answer (summary or failure) applied to the key: one at or
    before it is a delivery again (a restart or rebalance resumes from the last commit) and changes
    nothing — a failure counted twice would lengthen the cooldown, and move later boundaries."""
    deleted_at: int | None = None
    """Events-topic offset of the session's last ``delete_session`` (``None``: none folded). A summary
    whose chain began before it (``chain_from_offset``) summarizes deleted history: see :func:`on_summary`."""
    encoded: Any = field(default=None, init=False, compare=False, repr=False)
    """Not state: a cache the changelog encoder keeps of ``pending`` (``streams.app.tracked``), valid
    while ``pending`` is the same list and only grew. Never copied; the rules do not read it."""

    @property
    def unanswered(self) -> tuple[InFlight, ...]:
        """The key's emitted jobs not answered yet, oldest first."""
        if self.in_flight is None:
            return self.queued
        return (self.in_flight, *self.queued)

    @property
    def decided(self) -> list[PendingEvent]:
        """The events after the decided boundary (what decisions count)."""
        return self.pending[self.skip :]

    @property
    def boundary(self) -> SummaryBoundary | None:
        """The last applied summary's boundary; its ``version`` is the boundary format version."""
        if self.boundary_ts is None:
            return None
        return SummaryBoundary(
            cutoff_at=from_micros(self.boundary_ts),
            last_event_id=self.boundary_event_id,
            version=BOUNDARY_FORMAT_VERSION,
        )

    @property
    def counters(self) -> Counters:
        return self.own.counters

    def scope_for(self, trigger_key: str) -> Scope:
        """The scope a check triggered by ``trigger_key`` sees."""
        if self.filter_key != FULL_SESSION or trigger_key == FULL_SESSION:
            return self.own
        found = self.scopes.get(trigger_key)
        return found if found is not None else _seed_scope(self, trigger_key)

    def copy(self) -> SessionTriggerState:
        """An independent snapshot (its own pending list, counters and activities)."""
        return SessionTriggerState(
            self.app_name,
            self.user_id,
            self.session_id,
            self.filter_key,
            self.version,
            self.boundary_event_id,
            self.boundary_ts,
            list(self.pending),
            self.content,
            self.own.copy(),
            {k: s.copy() for k, s in self.scopes.items()},
            self.in_flight,
            self.high_offset,
            self.failed,
            self.learned_window,
            self.queued,
            self.decided_id,
            self.skip,
            self.adopted_at,
            self.answered_at,
            self.deleted_at,
        )

    def _replace(self, **changes: Any) -> SessionTriggerState:
        """A copy with ``changes`` (the named-tuple spelling, kept for callers)."""
        return replace(self.copy(), **changes)

    def to_bytes(self) -> bytes:
        return json.dumps(to_dict(self), separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes | str) -> SessionTriggerState:
        """Read :meth:`to_bytes` back; unreadable bytes raise :class:`CorruptTriggerStateError`."""
        try:
            raw = json.loads(data)
        except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
            raise CorruptTriggerStateError(f"trigger state is not valid JSON: {exc}") from exc
        return from_dict(raw)


def new_state(app_name: str, user_id: str, session_id: str, filter_key: str = FULL_SESSION) -> SessionTriggerState:
    return SessionTriggerState(app_name, user_id, session_id, filter_key)


def seed_branch_state(full: SessionTriggerState, filter_key: str) -> SessionTriggerState:
    """A new branch state built from the full-session state's pending index.

    Only the full session's decided view is seeded (events before its decided
    boundary are not, so the seed does not depend on when the full session's
    summaries were applied): the first counters of a branch that appears late
    may undercount; the summarizer still reads the whole branch history for its
    first summary.
    """
    entries = [p for p in full.decided if in_subtree(p.filter_key, filter_key)]
    scope = full.scopes.get(filter_key)
    activity = scope.activity.copy() if scope is not None else _activity_from(entries)
    return SessionTriggerState(
        full.app_name,
        full.user_id,
        full.session_id,
        filter_key,
        pending=entries,
        content=sum(1 for p in entries if p.flags & F_CONTENT),
        own=Scope(Counters.of(entries), activity),
        high_offset=full.high_offset,
        learned_window=full.learned_window,
        deleted_at=full.deleted_at,
    )


def _activity_from(entries: list[PendingEvent]) -> Activity:
    return Activity(last_ts=entries[-1].ts) if entries else Activity()


def _seed_scope(full: SessionTriggerState, key: str) -> Scope:
    entries = [p for p in full.pending[full.skip :] if in_subtree(p.filter_key, key)]
    return Scope(Counters.of(entries), _activity_from(entries))


def advance_in_place(activity: Activity, facts: EventFacts) -> None:
    """Move the scope's timeline past ``facts``: request start and idle gap, open tool calls, model."""
    ts = facts.entry.ts
    rid = facts.request_id
    if rid:
        if rid != activity.request_id:
            last = activity.last_ts
            activity.gap = ts - last if last is not None and ts > last else None
            activity.request_id = rid
            activity.request_started = ts
        activity.last_request_id = rid
    if facts.opened_calls or facts.tool_result_id:
        _update_calls(activity, facts)
    if facts.model is not None or facts.context_window is not None:
        activity.model = facts.model or activity.model
        activity.context_window = facts.context_window
    activity.last_ts = ts


def _update_calls(activity: Activity, facts: EventFacts) -> None:
    if facts.opened_calls:
        activity.open_calls = activity.open_calls + facts.opened_calls
    result_id = facts.tool_result_id
    if result_id and result_id in activity.open_calls:
        activity.open_calls = tuple(c for c in activity.open_calls if c != result_id)


def advance(activity: Activity, facts: EventFacts) -> Activity:
    """A copy of ``activity`` moved past ``facts`` (see :func:`advance_in_place`)."""
    out = activity.copy()
    advance_in_place(out, facts)
    return out


def evolve(
    state: SessionTriggerState,
    event: SessionEvent | EventFacts,
    policy: SummaryPolicy | None = None,
) -> SessionTriggerState:
    """Fold one event into ``state`` in place and return it (see the module contracts).

    Pass precomputed :class:`EventFacts` to share one token count across keys;
    for a raw event the tokens are counted with ``policy``'s counter (or the
    process-wide one).
    """
    if isinstance(event, EventFacts):
        facts = event
    elif policy is not None:
        facts = event_facts(event, policy.counter, keywords=policy.important_keywords)
    else:
        facts = event_facts(event)
    if not facts.counted:
        return state
    offset = facts.offset
    if already_applied(state, offset):
        return state
    key = state.filter_key
    entry = facts.entry
    event_key = entry.filter_key
    if key:
        # A branch: its subtree plus keyless events.
        if event_key and event_key != key and not event_key.startswith(key + SEPARATOR):
            return state
        counts = True
    else:
        counts = not event_key or event_key == state.app_name
        if event_key or state.scopes:
            _evolve_scopes(state, facts)  # before the append: a new scope is seeded from the index
    own = state.own
    if counts:
        own.counters.add_in_place(entry)
    advance_in_place(own.activity, facts)
    state.pending.append(entry)
    if entry.flags & F_CONTENT:
        state.content += 1
    if offset is not None:
        state.high_offset = offset
    return state


def _evolve_scopes(full: SessionTriggerState, facts: EventFacts) -> None:
    scopes = full.scopes
    entry = facts.entry
    event_key = entry.filter_key
    if not event_key:
        touched: list[Scope] = list(scopes.values())
    else:
        if event_key not in scopes:
            scopes[event_key] = _seed_scope(full, event_key)
        touched = [scopes[k] for k in ancestors(event_key) if k in scopes]
    for scope in touched:
        scope.counters.add_in_place(entry)
        advance_in_place(scope.activity, facts)


def on_summary(state: SessionTriggerState, summary: SessionSummary, offset: int | None = None) -> SessionTriggerState:
    """Advance the boundary to ``summary``'s (see the module contracts).

    Returns a new state (``state`` is not modified), or ``state`` itself for a
    stale, duplicate or foreign summary — or one read at summaries-topic
    ``offset`` before the key's last epoch switch (a line the session left).
    A summary of deleted history (:func:`of_deleted_history`: a job in flight at the session's
    deletion, answered after it) only raises the version: its boundary is the deleted events',
    and would cut the events published since out of the pending index (and be the boundary a
    ``summarize_sync`` joins). The jobs in the queue were all decided after the deletion: it
    answers none of them, even one of the same id (history re-imported with its event ids).
    The boundary's event id is looked up in the pending index; a boundary on an
    event the state never indexed (partial, skipped, or already covered) falls
    back to the timestamp rule, which keeps events at the cutoff instant.
    """
    if (
        summary.filter_key != state.filter_key
        or summary.session_id != state.session_id
        or summary.version <= state.version
        or (offset is not None and state.adopted_at is not None and offset < state.adopted_at)
        or answered_before(state, offset)
    ):
        return state
    if of_deleted_history(state, summary):
        # Its job was decided before the deletion and answered after it (the queue it answers was
        # dropped then). Its version still counts: the summarize side numbers the next summary after
        # it, and a job built on a lower version would be judged covered by it and never run.
        out = state.copy()
        out.version = summary.version
        if offset is not None:
            out.answered_at = offset
        return out
    boundary = summary.boundary
    remaining = delta_after(
        state.pending,
        boundary.last_event_id,
        boundary.cutoff_at,
        id_of=lambda p: p.event_id,
        micros_of=lambda p: p.ts,
    )
    out = rebase(state, remaining, boundary, summary.version, summary.job_id)
    if offset is not None:
        out.answered_at = offset
    return out


def of_deleted_history(state: SessionTriggerState, summary: SessionSummary) -> bool:
    """``summary``'s chain began before the session's last deletion: it summarizes deleted events.

    A job carries the session's first offset as it was when decided, and a summary carries it on
    (``chain_from_offset``); a deletion resets it to the first record after the deletion. Not known
    (a summary of an older build, a state that folded no deletion) is not deleted history.
    """
    return before_deletion(state, summary.chain_from_offset)


def before_deletion(state: SessionTriggerState, first_offset: int | None) -> bool:
    """A job that read the session from events-topic ``first_offset`` was decided before its last deletion
    (``None``: not known, so not before)."""
    return first_offset is not None and state.deleted_at is not None and first_offset < state.deleted_at


def already_applied(state: SessionTriggerState | None, offset: int | None) -> bool:
    """``state`` has folded the events-topic record at ``offset``, or a later one (offsets only grow).

    A record of the session's partition at or below it was delivered before: a delivery again
    (a restart or a rebalance resumes from the last commit, which may trail the changelog). A
    command raises no ``high_offset``: one is known as delivered again once a later event is folded.
    """
    if state is None:
        return False
    high = state.high_offset
    return offset is not None and high is not None and offset <= high


def answered_before(state: SessionTriggerState, offset: int | None) -> bool:
    """The answer at summaries-topic ``offset`` was applied to ``state`` already (see ``answered_at``)."""
    return offset is not None and state.answered_at is not None and offset <= state.answered_at


def on_adoption(state: SessionTriggerState, head: SessionSummary | None, at: int) -> SessionTriggerState:
    """The session switched epochs at summaries-topic offset ``at``; ``head`` is the key's latest
    summary in the adopted epoch (``None``: the epoch has none for the key).

    The key now follows that line: its version becomes the head's (or 0), so the
    epoch's next summaries apply whatever the versions of the line it left. The
    applied boundary becomes the head's: a head past it cuts the pending index
    and answers the jobs whose targets it covers (as a summary does); a head
    behind it keeps the index (the summarize side rolls the head forward over
    every event after it, and decisions only count after the decided boundary,
    which does not move). Idempotent: a switch at or before ``adopted_at`` is
    ignored (delivered again), and so are the summaries before it (:func:`on_summary`).
    A copy, or ``state`` itself when ignored.
    """
    if state.adopted_at is not None and at <= state.adopted_at:
        return state
    if head is None or head.filter_key != state.filter_key or head.session_id != state.session_id:
        out = state.copy()
        out.version = 0
        out.adopted_at = at
        return out
    boundary = head.boundary
    remaining = delta_after(
        state.pending, boundary.last_event_id, boundary.cutoff_at, id_of=lambda p: p.event_id, micros_of=lambda p: p.ts
    )
    out = rebase(state, remaining, boundary, head.version, head.job_id)
    out.adopted_at = at
    return out


def rebase(
    state: SessionTriggerState,
    remaining: list[PendingEvent] | tuple[PendingEvent, ...],
    boundary: SummaryBoundary,
    version: int,
    job_id: str | None = None,
) -> SessionTriggerState:
    """A new state with ``remaining`` as its pending index (the applied boundary moved).

    The queued jobs up to ``job_id`` (the summary's), and any whose target the
    summary covers, are answered. The decided boundary stays: the counters keep
    counting after it (recomputed, they are what they were).
    """
    cutoff = to_micros(boundary.cutoff_at)
    entries = list(remaining)
    jobs = state.unanswered
    answered = next((i + 1 for i, j in enumerate(jobs) if j.job_id == job_id), 0) if job_id else 0
    present = {p.event_id for p in entries} if jobs else set()
    while answered < len(jobs) and jobs[answered].upto_event_id not in present:
        answered += 1
    left = jobs[answered:]
    out = SessionTriggerState(
        state.app_name,
        state.user_id,
        state.session_id,
        state.filter_key,
        version,
        boundary.last_event_id,
        cutoff,
        entries,
        0,
        Scope(Counters(), state.own.activity.consume_gap(cutoff)),
        {k: Scope(Counters(), scope.activity.consume_gap(cutoff)) for k, scope in state.scopes.items()},
        left[0] if left else None,
        state.high_offset,
        None,  # a summary ends a run of failures
        state.learned_window,
        left[1:],
        state.decided_id,
        0,
        state.adopted_at,
        state.answered_at,
        state.deleted_at,
    )
    _recount(out, _skip_for(entries, state.decided_id))
    return out


def _skip_for(pending: list[PendingEvent], decided_id: str | None) -> int:
    """How many leading entries of ``pending`` lie at or before the decided event."""
    if decided_id is None:
        return 0
    for i in range(len(pending) - 1, -1, -1):
        if pending[i].event_id == decided_id:
            return i + 1
    return 0


def _recount(state: SessionTriggerState, skip: int, cutoff: int | None = None) -> None:
    """In place: the counters, scopes and ``content`` over ``pending[skip:]`` (gaps consumed up to ``cutoff``)."""
    view = state.pending[skip:]
    key, app = state.filter_key, state.app_name
    state.skip = skip
    state.content = sum(1 for p in view if p.flags & F_CONTENT)
    own = state.own
    activity = own.activity.consume_gap(cutoff) if cutoff is not None else own.activity
    state.own = Scope(Counters.of(p for p in view if counts_toward(p.filter_key, key, app)), activity)
    if state.scopes:
        state.scopes = {
            k: Scope(
                Counters.of(p for p in view if in_subtree(p.filter_key, k)),
                scope.activity.consume_gap(cutoff) if cutoff is not None else scope.activity,
            )
            for k, scope in state.scopes.items()
        }


def record_decision(state: SessionTriggerState, flight: InFlight) -> SessionTriggerState:
    """In place: ``flight`` joins the key's queue and its target becomes the decided boundary.

    A job already queued (same ``job_id``: a re-emission) only gets its new
    emission time and attempt; the decided boundary does not move.
    """
    jobs = state.unanswered
    for i, job in enumerate(jobs):
        if job.job_id == flight.job_id:
            kept = flight._replace(
                context=flight.context or job.context,
                upto_offset=job.upto_offset if job.upto_offset is not None else flight.upto_offset,
            )
            if i == 0 and state.in_flight is not None:
                state.in_flight = kept
            else:
                at = i - 1 if state.in_flight is not None else i
                state.queued = (*state.queued[:at], kept, *state.queued[at + 1 :])
            return state
    if state.in_flight is None and not state.queued:
        state.in_flight = flight
    else:
        state.queued = (*state.queued, flight)
    state.decided_id = flight.upto_event_id
    skip = _skip_for(state.pending, flight.upto_event_id)
    _recount(state, skip, state.pending[skip - 1].ts if skip else None)
    return state


def mark_emitted(
    state: SessionTriggerState,
    job_id: str,
    upto_event_id: str,
    at: int,
    attempt: int = 0,
    context: Mapping[str, str] | None = None,
    upto_offset: int | None = None,
) -> SessionTriggerState:
    """A copy of ``state`` with the job queued for this key (see :func:`record_decision`)."""
    out = state.copy()
    flight = InFlight(job_id, upto_event_id, at, attempt, dict(context) if context else None, upto_offset)
    return record_decision(out, flight)


def on_job_failed(
    state: SessionTriggerState,
    job_id: str,
    *,
    gave_up: bool = False,
    at: int | None = None,
    window: int | None = None,
    offset: int | None = None,
) -> SessionTriggerState:
    """A job answered with a failure: it leaves the key's queue (the applied boundary stays).

    ``gave_up`` (the job failed, rather than finding nothing to do) gives the
    job's range back when it was the last decided one: the decided boundary
    returns to the previous unanswered job's target, or to the applied boundary,
    and the range is decided again (a later queued job covers it anyway). It also
    counts one more failure in a row, anchored at the latest event time of the
    state (``at``, the failure's own time in µs, only when the state has seen no
    event): the cooldown of :func:`cooling_down`. ``window`` (named by a
    context-length refusal) becomes ``learned_window``. ``offset``: where the failure
    is on the summaries topic; one the key has applied already changes nothing
    (:func:`answered_before`). A copy, or ``state`` itself when nothing changes.
    """
    if answered_before(state, offset):
        return state
    jobs = state.unanswered
    index = next((i for i, j in enumerate(jobs) if j.job_id == job_id), None)
    learns = window is not None and window > 0 and window != state.learned_window
    if not (index is not None or gave_up or learns):
        return state
    out = state.copy()
    left = jobs
    if index is not None:
        left = jobs[:index] + jobs[index + 1 :]
        out.in_flight = left[0] if left else None
        out.queued = left[1:]
    # The given-up job was the last decided one; or it already left the queue (a re-emission of
    # it was answered first) and no job is left that would cover its range.
    if gave_up and (index == len(jobs) - 1 or (index is None and not jobs)) and state.decided_id is not None:
        out.decided_id = left[-1].upto_event_id if left else None
        _recount(out, _skip_for(out.pending, out.decided_id))
    if gave_up:
        # Event time only: a job emitted by a command or a sweep's poke carries the record's log
        # (wall-clock) time, which would move the cooldown off the session's clock (a backlog of
        # events older than the wall clock got no job until its event time passed it).
        anchor = _latest_event_ts(state)
        count = state.failed.failures + 1 if state.failed is not None else 1
        out.failed = Failed(count, anchor if anchor is not None else at)
    if learns:
        out.learned_window = window
    if offset is not None:
        out.answered_at = offset
    return out


def _latest_event_ts(state: SessionTriggerState) -> int | None:
    """The latest event time (µs) the key has seen: its own activity and its pending events."""
    times = [t for t in (state.own.activity.last_ts, state.pending[-1].ts if state.pending else None) if t is not None]
    return max(times) if times else None


def cooldown_until(state: SessionTriggerState, policy: SummaryPolicy) -> int | None:
    """Event time (µs) before which the key gets no new job (``None``: not cooling down)."""
    failed = state.failed
    if failed is None:
        return None
    span = policy.cooldown_us(failed.failures)
    if span <= 0:
        return None
    return (failed.at or 0) + span


def cooling_down(state: SessionTriggerState, policy: SummaryPolicy, now_us: int | None) -> bool:
    """Whether ``state``'s key still cools down at event time ``now_us`` (``None``: unknown, so yes)."""
    until = cooldown_until(state, policy)
    return until is not None and (now_us is None or now_us < until)


class TriggerDecision(NamedTuple):
    """Whether to summarize ``filter_key`` now, and why (immutable).

    ``reason`` is ``fired``, ``force``, ``checks_failed``, ``not_triggering`` (the
    event may not trigger), ``cooling_down`` (jobs of the key failed:
    see :func:`on_job_failed`), ``empty_delta``, ``no_content``,
    ``held_back`` (a pass now would keep every pending event back, see
    ``held_back``) or
    ``not_allowed`` (a sync command for a key the allowlist refuses; see
    ``planner.apply_command``) or ``delivered_again`` (a command the state has seen:
    ``planner.apply_command_again``).
    ``upto`` is the last pending event: the furthest the job may advance to.
    ``retry_of`` (whether or not the decision fires) is the key's oldest
    unanswered job when it has waited longer than the job timeout (event time):
    the caller re-emits that very job (same id and target), which moves no
    boundary. ``report`` is set when the decision fires; ``outcomes`` always lists the
    checks evaluated. A named tuple: one is made per decided target per event.
    """

    fire: bool
    filter_key: str
    trigger_key: str
    reason: str
    report: TriggerReport | None = None
    outcomes: tuple[CheckOutcome, ...] = ()
    upto: PendingEvent | None = None
    force: bool = False
    retry_of: InFlight | None = None


_new_tuple = tuple.__new__


def _no(key: str, trigger_key: str, reason: str) -> TriggerDecision:
    return _new_tuple(TriggerDecision, (False, key, trigger_key, reason, None, (), None, False, None))


def decide(
    state: SessionTriggerState,
    policy: SummaryPolicy,
    now: SessionEvent | EventFacts | None = None,
    *,
    trigger_key: str | None = None,
    force: bool = False,
    context: Mapping[str, Any] | None = None,
) -> TriggerDecision:
    """Decide whether ``state``'s key needs a summary, after ``now`` was folded in.

    ``now`` is the event being processed (``None`` for a command): it must be one
    that may trigger (see ``eligibility``). ``trigger_key`` defaults to the
    event's key; for the full-session state a branch trigger key selects that
    branch's scope of the full delta. ``force`` skips the checks and the event
    rule but never an empty delta. Reads ``state``, never changes it.
    """
    key = state.filter_key
    facts: EventFacts | None = None
    if now is not None:
        facts = (
            now if isinstance(now, EventFacts) else event_facts(now, policy.counter, keywords=policy.important_keywords)
        )
    tk = trigger_key if trigger_key is not None else (facts.entry.filter_key if facts is not None else key)
    if key or not tk:
        scope = state.own
    else:
        found = state.scopes.get(tk)
        scope = found if found is not None else _seed_scope(state, tk)
    if (
        facts is not None
        and not force
        and (not facts.model_output or (facts.tool_result_id and scope.activity.open_calls))
    ):
        return _no(key, tk, "not_triggering")
    retry: InFlight | None = None
    head = state.in_flight
    if (
        head is not None
        and not force
        and facts is not None
        and facts.entry.ts - head.emitted_at > policy.job_timeout_us
    ):
        retry = head  # re-emitted as it was: the decided boundary does not move
    # A key cooling down re-emits no timed-out job either: its failure answered the job.
    if state.failed is not None and not force:
        if cooling_down(state, policy, facts.entry.ts if facts else None):
            return _no(key, tk, "cooling_down")
        if state.in_flight is not None or state.queued:
            # Half-open: after failures one trial job at a time (no queue behind it) until it is answered.
            held = _no(key, tk, "cooling_down")
            return held._replace(retry_of=retry) if retry is not None else held
    decision = _decide_view(state, policy, now, scope, key, tk, force, context)
    return decision._replace(retry_of=retry) if retry is not None else decision


def _decide_view(
    state: SessionTriggerState,
    policy: SummaryPolicy,
    now: SessionEvent | EventFacts | None,
    scope: Scope,
    key: str,
    tk: str,
    force: bool,
    context: Mapping[str, Any] | None,
) -> TriggerDecision:
    """The decision over the events after the decided boundary."""
    pending = state.pending
    skip = state.skip
    if len(pending) <= skip:
        return _no(key, tk, "empty_delta")
    upto = pending[-1]
    if force:
        outcome = CheckOutcome("force", True, scope.counters.events, 0, "events")
        return TriggerDecision(True, key, tk, "force", outcome.report(), (outcome,), upto, True, None)
    if not state.content:
        return _no(key, tk, "no_content")
    counters = scope.counters
    if policy.keep_recent_rounds or policy.skip_recent_events:
        if state.decided_id is not None:
            held = all_held_back_after_decision(pending[skip:], policy.keep_recent_rounds, policy.skip_recent_events)
        else:
            held = all_held_back(pending, policy.keep_recent_rounds, policy.skip_recent_events)
        if held:
            return _no(key, tk, "held_back")
        counters = _counters_after_held_back(state, policy, scope, tk)
    checks = policy.checks
    if not checks:
        outcome = CheckOutcome("always", True, counters.events, 0, "events")
        return TriggerDecision(True, key, tk, "fired", outcome.report(), (outcome,), upto, False, None)
    view_ = _new_tuple(
        TriggerView,
        (
            key,
            tk,
            state.app_name,
            counters,
            scope.activity,
            state,
            now if isinstance(now, SessionEvent) else None,
            {**policy.context, **context} if context else policy.context,
        ),
    )
    passed, outcomes = evaluate_all(checks, view_)
    if not passed:
        return _new_tuple(TriggerDecision, (False, key, tk, "checks_failed", None, outcomes, upto, False, None))
    # The report is only built for a firing decision: most decisions do not fire.
    best = preferred_outcome(outcomes)
    report = best.report() if best is not None else None
    return TriggerDecision(True, key, tk, "fired", report, outcomes, upto, False, None)


def _counters_after_held_back(
    state: SessionTriggerState, policy: SummaryPolicy, scope: Scope, trigger_key: str
) -> Counters:
    """The scope's counters without the events the last summary held back.

    After a decision the counters already start after the decided boundary:
    the pass for it holds its tail back, and that tail counted toward it. With
    no decision (a summary applied alone, or after a given-up job), the head
    of the pending index the applied summary held back is left out; before any
    summary nothing is.
    """
    if state.decided_id is not None or state.boundary_ts is None:
        return scope.counters
    held = state.pending[: held_back_prefix(state.pending, policy.keep_recent_rounds, policy.skip_recent_events)]
    key, app = state.filter_key, state.app_name
    if key or not trigger_key or scope is state.own:
        return without_held_back(scope.counters, held, lambda p: counts_toward(p.filter_key, key, app))
    return without_held_back(scope.counters, held, lambda p: in_subtree(p.filter_key, trigger_key))


def to_dict(state: SessionTriggerState) -> dict[str, Any]:
    """Compact JSON-ready form (pending entries and scopes as arrays)."""
    out: dict[str, Any] = {
        "f": STATE_FORMAT,
        "a": state.app_name,
        "u": state.user_id,
        "s": state.session_id,
        "k": state.filter_key,
        "v": state.version,
        "b": [state.boundary_event_id, state.boundary_ts],
        "p": [list(p) for p in state.pending],
        "o": _scope_out(state.own),
    }
    if state.scopes:
        out["sc"] = {k: _scope_out(s) for k, s in state.scopes.items()}
    if state.in_flight is not None:
        f = state.in_flight
        out["i"] = flight_row(f)
    if state.high_offset is not None:
        out["h"] = state.high_offset
    if state.failed is not None or state.learned_window is not None:
        out["fl"] = failure_row(state)
    if state.decided_id is not None or state.queued:
        out["d"] = decided_row(state)
    if state.adopted_at is not None:
        out["ad"] = state.adopted_at
    if state.answered_at is not None:
        out["an"] = state.answered_at
    if state.deleted_at is not None:
        out["dl"] = state.deleted_at
    return out


def decided_row(state: SessionTriggerState) -> list[Any]:
    """``[decided event id, [queued job, ...]]`` (queued jobs as in-flight rows)."""
    return [state.decided_id, [flight_row(f) for f in state.queued]]


def decided_in(row: Any) -> tuple[str | None, tuple[InFlight, ...]]:
    """Read :func:`decided_row` back."""
    if row is None:
        return None, ()
    decided_id, queued = row
    if decided_id is not None and not isinstance(decided_id, str):
        raise TypeError(f"decided event id must be a string, got {type(decided_id).__name__}")
    return decided_id, tuple(flight_in(f) for f in queued)


def with_decided(
    state: SessionTriggerState, decided_id: str | None, queued: tuple[InFlight, ...]
) -> SessionTriggerState:
    """In place: the read-back decided part, ``skip`` and ``content`` derived from it."""
    state.decided_id = decided_id
    state.queued = queued
    state.skip = skip = _skip_for(state.pending, decided_id)
    state.content = sum(1 for p in state.pending[skip:] if p.flags & F_CONTENT)
    return state


def failure_row(state: SessionTriggerState) -> list[Any]:
    """``[failures in a row, their anchor (µs), learned window]`` (the changelog's form)."""
    failed = state.failed
    return [failed.failures if failed else 0, failed.at if failed else None, state.learned_window]


def failure_in(row: Any) -> tuple[Failed | None, int | None]:
    """Read :func:`failure_row` back (``None``: neither failures nor a window)."""
    if row is None:
        return None, None
    count, at, window = row
    for name, value in (("failures", count), ("anchor", at), ("window", window)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    return (Failed(count, at) if count else None), window


_STATE_FIELDS = {
    "a": "app_name",
    "u": "user_id",
    "s": "session_id",
    "k": "filter_key",
    "v": "version",
    "b": "boundary",
    "p": "pending index",
    "o": "own scope",
    "sc": "branch scopes",
    "i": "in-flight job",
    "fl": "failure cooldown",
    "d": "decided boundary",
    "ad": "epoch switch offset",
    "an": "answers offset",
    "dl": "deletion offset",
}


def from_dict(data: Mapping[str, Any]) -> SessionTriggerState:
    """Read :func:`to_dict` back (this runs during changelog recovery).

    Raises :class:`CorruptTriggerStateError` (an ``InvalidRecordError`` and a
    ``ValueError``) naming the state and the part that cannot be read.
    """
    if not isinstance(data, Mapping):
        raise CorruptTriggerStateError(f"trigger state must be a JSON object, got {type(data).__name__}")
    if data.get("f") != STATE_FORMAT:
        raise CorruptTriggerStateError(
            f"unknown trigger state format {data.get('f')!r} (this build reads {STATE_FORMAT})"
        )
    try:
        part = "p"
        pending = [PendingEvent(*p) for p in data["p"]]
        part = "i"
        flight = data.get("i")
        in_flight = flight_in(flight) if flight else None
        part = "b"
        boundary_event_id, boundary_ts = data["b"]
        part = "o"
        own = _scope_in(data["o"])
        part = "sc"
        scopes = {k: _scope_in(s) for k, s in data.get("sc", {}).items()}
        part = "fl"
        failed, window = failure_in(data.get("fl"))
        part = "d"
        decided_id, queued = decided_in(data.get("d"))
        for part in ("a", "u", "s", "k"):
            if not isinstance(data[part], str):
                raise TypeError(f"expected a string, got {type(data[part]).__name__}")
        part = "v"
        if not isinstance(data["v"], int):
            raise TypeError(f"expected an integer, got {type(data['v']).__name__}")
        part = "ad"
        adopted_at = offset_in(data.get("ad"))
        part = "an"
        answered_at = offset_in(data.get("an"))
        part = "dl"
        deleted_at = offset_in(data.get("dl"))
    except KeyError as exc:
        raise CorruptTriggerStateError(f"{_state_label(data)}: missing {_part_label(part)}") from exc
    except (TypeError, ValueError, IndexError, AttributeError) as exc:
        raise CorruptTriggerStateError(f"{_state_label(data)}: malformed {_part_label(part)}: {exc}") from exc
    state = SessionTriggerState(
        data["a"],
        data["u"],
        data["s"],
        data["k"],
        data["v"],
        boundary_event_id,
        boundary_ts,
        pending,
        0,
        own,
        scopes,
        in_flight,
        data.get("h"),
        failed,
        window,
    )
    state.adopted_at = adopted_at
    state.answered_at = answered_at
    state.deleted_at = deleted_at
    return with_decided(state, decided_id, queued)


def offset_in(value: Any) -> int | None:
    """Read an offset (``adopted_at``, ``answered_at``, a job's ``upto_offset``) back (``None``: none yet)."""
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise TypeError(f"offset must be an integer, got {type(value).__name__}")
    return value


def _state_label(data: Mapping[str, Any]) -> str:
    ids = "/".join(str(data.get(k, "?")) for k in ("a", "u", "s"))
    return f"trigger state {ids} key {data.get('k', '?')!r}"


def _part_label(part: str) -> str:
    return f"{_STATE_FIELDS.get(part, part)} ({part!r})"


def _scope_out(scope: Scope) -> list[Any]:
    c, a = scope.counters, scope.activity
    return [
        [c.events, c.tokens, c.rounds, c.max_text_len, c.keywords],
        [
            a.last_ts,
            a.last_request_id,
            a.request_id,
            a.request_started,
            a.gap,
            list(a.open_calls),
            a.model,
            a.context_window,
        ],
    ]


def _scope_in(data: list[Any]) -> Scope:
    c, a = data
    return Scope(Counters(*c), Activity(a[0], a[1], a[2], a[3], a[4], tuple(a[5]), a[6], a[7]))
