"""Joins: a ``summarize_sync`` that fires no job waits for the key's decided boundary (pure).

The Go guide's ``CreateSessionSummary`` takes the key's lock, so it waits for
the job running for the key, and its caller then reads the summary that job
made. Here the request's ``join`` job is emitted to the jobs topic behind the
key's jobs decided before it; the summarize side runs a key's jobs one at a
time, in order, and answers the join with the key's latest summary then (or
with the failure of the job it waited for). The join is decided from the
trigger state alone — the decided boundary, never how far the summaries came
back — so a replay makes the same joins, and it changes no state: it is in no
queue and moves no boundary.
"""

from __future__ import annotations

import hashlib
from datetime import datetime

from schemas import SCHEMA_VERSION, JobBoundary, SummarizeSync, SummaryJob, TriggerReport
from streams.rules.boundaries import from_micros
from streams.rules.trigger_state import SessionTriggerState, TriggerDecision


def join_target(state: SessionTriggerState) -> tuple[str, int] | None:
    """``(event id, µs)`` a sync request that fires no job waits for, or ``None``: nothing to wait for.

    The decided boundary — the target of the last job decided for the key, answered
    or not, so the answer does not depend on how fast summaries came back — or, with
    none decided (a given-up job gave its range back), the applied summary's boundary.
    """
    if state.decided_id is not None and state.skip:
        entry = state.pending[state.skip - 1]  # the decided event (``skip`` is derived from it)
        return entry.event_id, entry.ts
    if state.boundary_ts is not None:
        # A summary reached the decided event (it left the pending index), or nothing is decided.
        # A boundary with no event id (older summaries) is compared by its cutoff.
        return state.boundary_event_id or "", state.boundary_ts
    return None


def join_job(
    state: SessionTriggerState, command: SummarizeSync, decision: TriggerDecision, *, created_at: datetime
) -> SummaryJob | None:
    """The ``join`` job of a sync ``command`` whose ``decision`` fired no job, or ``None`` (nothing to wait for).

    It aims at :func:`join_target` and carries the command's ``reply_to``; its id
    is derived from the command's. See the module docstring for how it is answered.
    """
    target = join_target(state)
    if target is None:
        return None
    event_id, ts = target
    raw = "\x1f".join(("join", state.app_name, state.user_id, state.session_id, state.filter_key, command.command_id))
    report = TriggerReport(name="manual", detail=f"join: {decision.reason}")
    return SummaryJob.model_construct(
        schema_version=SCHEMA_VERSION,
        job_id=hashlib.sha256(raw.encode()).hexdigest()[:32],
        app_name=state.app_name,
        user_id=state.user_id,
        session_id=state.session_id,
        filter_key=state.filter_key,
        cascade_full_session=False,
        from_version=state.version,
        previous_boundary=state.boundary,
        upto=JobBoundary.model_construct(last_event_id=event_id, cutoff_at=from_micros(ts), offset=None),
        trigger=report,
        force=command.force,
        origin="join",
        reply_to=command.reply_to,
        attempt=0,
        created_at=created_at,
        context=dict(command.context) if command.context else {},
    )
