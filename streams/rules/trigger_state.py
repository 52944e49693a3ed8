"""The trigger fold: ``SessionTriggerState`` per ``(session, filter key)``.

Contracts (the track agent relies on them):

* ``state = evolve(state, event)`` folds one event of the session (in log order)
  into the state of one key. Events outside the key's summary input, partial
  and ``skip_summarization`` events leave it unchanged. With ``offset`` given,
  an already-applied offset is ignored, so redelivery is harmless.
* ``decide(state, policy, event)`` is pure: the same state, policy and event give
  the same decision. It reads event timestamps, never the wall clock. It does not
  change the state; the caller records an emitted job with ``mark_emitted``.
* ``state = on_summary(state, summary)`` advances the boundary to the summary's
  and recomputes the counters over the events left after it — including events
  that arrived while the summary was being written. Stale or duplicate summaries
  (``version`` not above the state's) are ignored, so replay is idempotent.

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
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple

from schemas import SessionEvent, SessionSummary, SummaryBoundary, TriggerReport
from streams.rules.boundaries import delta_after, from_micros, to_micros
from streams.rules.checks import CheckOutcome, TriggerView, evaluate_all, preferred_outcome
from streams.rules.counters import F_CONTENT, Activity, Counters, PendingEvent
from streams.rules.event_facts import EventFacts, event_facts
from streams.rules.filter_keys import FULL_SESSION, ancestors, counts_toward, in_summary_input
from streams.rules.policy import SummaryPolicy

STATE_FORMAT = 1
_NO_SCOPES: Mapping[str, Scope] = MappingProxyType({})


class Scope(NamedTuple):
    """Counters and activity of one scope."""

    counters: Counters = Counters()
    activity: Activity = Activity()


class InFlight(NamedTuple):
    """The job emitted for this key and not answered yet."""

    job_id: str
    upto_event_id: str
    emitted_at: int
    """Timestamp (µs) of the event that emitted it."""
    attempt: int = 0


class SessionTriggerState(NamedTuple):
    """Trigger state of one ``(session, filter key)``. Immutable; see the module contracts.

    A named tuple rather than a dataclass: it is rebuilt for every event of
    every affected key, and tuple construction is several times cheaper.
    """

    app_name: str
    user_id: str
    session_id: str
    filter_key: str = FULL_SESSION
    version: int = 0
    """Version of the last summary applied (0: none yet)."""
    boundary_event_id: str | None = None
    boundary_ts: int | None = None
    pending: tuple[PendingEvent, ...] = ()
    content: int = 0
    """Pending events with summarizable text."""
    own: Scope = Scope()
    scopes: Mapping[str, Scope] = _NO_SCOPES
    """Full-session state only: the full delta scoped to each triggering branch key."""
    in_flight: InFlight | None = None
    high_offset: int | None = None

    @property
    def boundary(self) -> SummaryBoundary | None:
        if self.boundary_ts is None:
            return None
        return SummaryBoundary(cutoff_at=from_micros(self.boundary_ts), last_event_id=self.boundary_event_id, version=1)

    @property
    def counters(self) -> Counters:
        return self.own.counters

    def scope_for(self, trigger_key: str) -> Scope:
        """The scope a check triggered by ``trigger_key`` sees."""
        if self.filter_key != FULL_SESSION or trigger_key == FULL_SESSION:
            return self.own
        found = self.scopes.get(trigger_key)
        return found if found is not None else _seed_scope(self, trigger_key)

    def to_bytes(self) -> bytes:
        return json.dumps(to_dict(self), separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes | str) -> SessionTriggerState:
        return from_dict(json.loads(data))


def new_state(app_name: str, user_id: str, session_id: str, filter_key: str = FULL_SESSION) -> SessionTriggerState:
    return SessionTriggerState(app_name, user_id, session_id, filter_key)


def seed_branch_state(full: SessionTriggerState, filter_key: str) -> SessionTriggerState:
    """A new branch state built from the full-session state's pending index.

    Events before the full-session boundary are not in the index, so the first
    counters of a branch that appears late may undercount; the summarizer still
    reads the whole branch history for its first summary.
    """
    entries = tuple(p for p in full.pending if in_summary_input(p.filter_key, filter_key))
    scope = full.scopes.get(filter_key)
    activity = scope.activity if scope is not None else _activity_from(entries)
    return SessionTriggerState(
        full.app_name,
        full.user_id,
        full.session_id,
        filter_key,
        pending=entries,
        content=sum(1 for p in entries if p.flags & F_CONTENT),
        own=Scope(Counters.of(entries), activity),
        high_offset=full.high_offset,
    )


def _activity_from(entries: tuple[PendingEvent, ...]) -> Activity:
    return Activity(last_ts=entries[-1].ts) if entries else Activity()


def _seed_scope(full: SessionTriggerState, key: str) -> Scope:
    entries = tuple(p for p in full.pending if in_summary_input(p.filter_key, key))
    return Scope(Counters.of(entries), _activity_from(entries))


def advance(activity: Activity, facts: EventFacts) -> Activity:
    """The scope's timeline after ``facts``: request start and idle gap, open tool calls, model."""
    ts = facts.entry.ts
    request_id, started, gap = activity.request_id, activity.request_started, activity.gap
    rid = facts.request_id
    if rid and rid != request_id:
        request_id, started = rid, ts
        last = activity.last_ts
        gap = ts - last if last is not None and ts > last else None
    open_calls = activity.open_calls
    if facts.opened_calls:
        open_calls = open_calls + facts.opened_calls
    if facts.tool_result_id and facts.tool_result_id in open_calls:
        open_calls = tuple(c for c in open_calls if c != facts.tool_result_id)
    model, window = activity.model, activity.context_window
    if facts.model is not None or facts.context_window is not None:
        model, window = facts.model or model, facts.context_window
    return Activity(ts, rid or activity.last_request_id, request_id, started, gap, open_calls, model, window)


def evolve(
    state: SessionTriggerState,
    event: SessionEvent | EventFacts,
    policy: SummaryPolicy | None = None,
) -> SessionTriggerState:
    """Fold one event into the state (see the module contracts).

    Pass precomputed :class:`EventFacts` to share one token count across keys;
    for a raw event the tokens are counted with ``policy``'s counter (or the
    process-wide one).
    """
    facts = (
        event if isinstance(event, EventFacts) else event_facts(event, policy.counter if policy is not None else None)
    )
    if not facts.counted:
        return state
    if facts.offset is not None and state.high_offset is not None and facts.offset <= state.high_offset:
        return state
    key = state.filter_key
    entry = facts.entry
    event_key = entry.filter_key
    if not in_summary_input(event_key, key):
        return state
    own = state.own
    counters = own.counters.add(entry) if counts_toward(event_key, key, state.app_name) else own.counters
    scopes = state.scopes
    if key == FULL_SESSION and (scopes or event_key):
        scopes = _evolve_scopes(state, facts)
    return SessionTriggerState(
        state.app_name,
        state.user_id,
        state.session_id,
        key,
        state.version,
        state.boundary_event_id,
        state.boundary_ts,
        (*state.pending, entry),
        state.content + (1 if entry.flags & F_CONTENT else 0),
        Scope(counters, advance(own.activity, facts)),
        scopes,
        state.in_flight,
        facts.offset if facts.offset is not None else state.high_offset,
    )


def _evolve_scopes(full: SessionTriggerState, facts: EventFacts) -> Mapping[str, Scope]:
    scopes = dict(full.scopes)
    event_key = facts.entry.filter_key
    if event_key and event_key not in scopes:
        scopes[event_key] = _seed_scope(full, event_key)
    touched = scopes.keys() if not event_key else [k for k in ancestors(event_key) if k in scopes]
    for k in list(touched):
        scope = scopes[k]
        scopes[k] = Scope(scope.counters.add(facts.entry), advance(scope.activity, facts))
    return scopes


def on_summary(state: SessionTriggerState, summary: SessionSummary) -> SessionTriggerState:
    """Advance the boundary to ``summary``'s (see the module contracts).

    The boundary's event id is looked up in the pending index; a boundary on an
    event the state never indexed (partial, skipped, or already covered) falls
    back to the timestamp rule, which keeps events at the cutoff instant.
    """
    if (
        summary.filter_key != state.filter_key
        or summary.session_id != state.session_id
        or summary.version <= state.version
    ):
        return state
    boundary = summary.boundary
    remaining = tuple(
        delta_after(
            state.pending,
            boundary.last_event_id,
            boundary.cutoff_at,
            id_of=lambda p: p.event_id,
            micros_of=lambda p: p.ts,
        )
    )
    return rebase(state, remaining, boundary, summary.version, summary.job_id)


def rebase(
    state: SessionTriggerState,
    remaining: tuple[PendingEvent, ...],
    boundary: SummaryBoundary,
    version: int,
    job_id: str | None = None,
) -> SessionTriggerState:
    """The state with ``remaining`` as its pending index, counters recomputed."""
    cutoff = to_micros(boundary.cutoff_at)
    key, app = state.filter_key, state.app_name
    own = Scope(
        Counters.of(p for p in remaining if counts_toward(p.filter_key, key, app)),
        state.own.activity.consume_gap(cutoff),
    )
    scopes = {
        k: Scope(
            Counters.of(p for p in remaining if in_summary_input(p.filter_key, k)),
            scope.activity.consume_gap(cutoff),
        )
        for k, scope in state.scopes.items()
    }
    in_flight = state.in_flight
    if in_flight is not None and (
        in_flight.job_id == job_id or all(p.event_id != in_flight.upto_event_id for p in remaining)
    ):
        in_flight = None
    return state._replace(
        version=version,
        boundary_event_id=boundary.last_event_id,
        boundary_ts=cutoff,
        pending=remaining,
        content=sum(1 for p in remaining if p.flags & F_CONTENT),
        own=own,
        scopes=scopes,
        in_flight=in_flight,
    )


def mark_emitted(
    state: SessionTriggerState, job_id: str, upto_event_id: str, at: int, attempt: int = 0
) -> SessionTriggerState:
    """Record the job now in flight for this key."""
    return state._replace(in_flight=InFlight(job_id, upto_event_id, at, attempt))


def on_job_failed(state: SessionTriggerState, job_id: str) -> SessionTriggerState:
    """A job given up for good: the key may trigger again (the boundary stays)."""
    if state.in_flight is not None and state.in_flight.job_id == job_id:
        return state._replace(in_flight=None)
    return state


@dataclass(frozen=True, slots=True)
class TriggerDecision:
    """Whether to summarize ``filter_key`` now, and why.

    ``reason`` is ``fired``, ``force``, ``checks_failed``, ``not_triggering`` (the
    event may not trigger), ``in_flight``, ``empty_delta`` or ``no_content``.
    ``upto`` is the last pending event: the furthest the job may advance to.
    ``report`` is set when the decision fires; ``outcomes`` always lists the
    checks evaluated.
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
    rule but never an empty delta.
    """
    key = state.filter_key
    facts: EventFacts | None = None
    if now is not None:
        facts = now if isinstance(now, EventFacts) else event_facts(now, policy.counter)
    tk = trigger_key if trigger_key is not None else (facts.entry.filter_key if facts is not None else key)
    scope = state.scope_for(tk)

    def no(reason: str) -> TriggerDecision:
        return TriggerDecision(False, key, tk, reason)

    if (
        facts is not None
        and not force
        and (not facts.model_output or (facts.tool_result_id and scope.activity.open_calls))
    ):
        return no("not_triggering")
    retry: InFlight | None = None
    if state.in_flight is not None and not force:
        if facts is None or facts.entry.ts - state.in_flight.emitted_at <= policy.job_timeout_us:
            return no("in_flight")
        retry = state.in_flight
    if not state.pending:
        return no("empty_delta")
    upto = state.pending[-1]
    if force:
        outcome = CheckOutcome("force", True, scope.counters.events, 0, "events")
        return TriggerDecision(True, key, tk, "force", outcome.report(), (outcome,), upto, True, retry)
    if not state.content:
        return no("no_content")
    if not policy.checks:
        outcome = CheckOutcome("always", True, scope.counters.events, 0, "events")
        return TriggerDecision(True, key, tk, "fired", outcome.report(), (outcome,), upto, False, retry)
    view = TriggerView(
        key,
        tk,
        state.app_name,
        scope.counters,
        scope.activity,
        state,
        now if isinstance(now, SessionEvent) else None,
        {**policy.context, **context} if context else policy.context,
    )
    passed, outcomes = evaluate_all(policy.checks, view)
    # The report is only built for a firing decision: most decisions do not fire.
    best = preferred_outcome(outcomes) if passed else None
    report = best.report() if best is not None else None
    reason = "fired" if passed else "checks_failed"
    return TriggerDecision(passed, key, tk, reason, report, outcomes, upto, False, retry)


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
        out["i"] = [f.job_id, f.upto_event_id, f.emitted_at, f.attempt]
    if state.high_offset is not None:
        out["h"] = state.high_offset
    return out


def from_dict(data: Mapping[str, Any]) -> SessionTriggerState:
    if data.get("f") != STATE_FORMAT:
        raise ValueError(f"unknown trigger state format {data.get('f')!r}")
    pending = tuple(PendingEvent(*p) for p in data["p"])
    flight = data.get("i")
    return SessionTriggerState(
        data["a"],
        data["u"],
        data["s"],
        data["k"],
        data["v"],
        data["b"][0],
        data["b"][1],
        pending,
        sum(1 for p in pending if p.flags & F_CONTENT),
        _scope_in(data["o"]),
        {k: _scope_in(s) for k, s in data.get("sc", {}).items()},
        InFlight(*flight) if flight else None,
        data.get("h"),
    )


def _scope_out(scope: Scope) -> list[Any]:
    c, a = scope.counters, scope.activity
    return [
        [c.events, c.tokens, c.rounds, c.max_text_len],
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
