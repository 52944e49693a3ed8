"""The background sweep (pure): which keys to poke with a ``summarize`` command.

* idle sweep (``idle_summary_after_s``, off by default): a key with pending
  content, no job in flight and no event for that long gets a job marked
  ``idle_sweep``;
* job timeout (``job_timeout_s``): a key whose job has been in flight longer
  than that (wall clock) gets the job re-emitted, even when the session went
  quiet (event-driven re-emission needs a new event).

The commands go through the events topic, so the track agent applies them in
order with the session's events, in its own partition.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import datetime

from schemas import SessionKey, Summarize
from streams.app.tracked import TrackedKey
from streams.rules.boundaries import to_micros
from streams.rules.policy import PolicySet
from streams.rules.trigger_state import cooling_down


def pokable(entry: TrackedKey, *, idle: bool) -> bool:
    """Whether the sweep can ever poke ``entry``, the clock aside.

    A job in flight whose emission time is known (job timeout), or — with the
    idle sweep on — pending content with no job in flight. An emission time left
    on a key whose jobs are all answered (values written before the track side
    cleared it) does not hold the sweep back: the events after the last job's
    target would wait for an event that may never come.
    """
    state = entry.state
    if state.in_flight is not None:
        return entry.emitted_wall is not None
    return idle and bool(state.pending) and state.content > 0


def sweep_commands(
    entries: Iterable[TrackedKey],
    *,
    now: datetime,
    idle_after_s: float | None,
    job_timeout_s: float,
    policies: PolicySet | None = None,
) -> list[tuple[int | None, bytes, Summarize]]:
    """``(partition, record key, command)`` for every key that needs a poke.

    The command is to be sent with the session's own record key (the track agent
    refuses a record of a session with another key). With ``policies``, a key that
    still cools down after a given-up job (at ``now``) gets no idle poke: the track
    agent would refuse it, and the sweep would send one at every run of the cooldown.
    """
    now_us = to_micros(now)
    out: list[tuple[int | None, bytes, Summarize]] = []
    for entry in entries:
        if not pokable(entry, idle=idle_after_s is not None):
            continue
        state = entry.state
        origin: str | None = None
        if state.in_flight is not None:
            if now.timestamp() - (entry.emitted_wall or 0.0) > job_timeout_s:
                origin = "retry"
        elif (
            idle_after_s is not None
            and now_us - state.pending[-1].ts > idle_after_s * 1e6
            and (policies is None or not cooling_down(state, policies.for_app(state.app_name), now_us))
        ):
            origin = "idle_sweep"
        if origin is None:
            continue
        marker = f"{origin}:{state.session_id}:{state.filter_key}:{state.version}:{now_us // 1_000_000}"
        out.append(
            (
                entry.partition,
                SessionKey(state.app_name, state.user_id, state.session_id).kafka_key()
                if entry.record_key is None
                else entry.record_key,
                Summarize.model_validate(
                    {
                        "app_name": state.app_name,
                        "user_id": state.user_id,
                        "session_id": state.session_id,
                        "filter_key": state.filter_key,
                        "command_id": hashlib.sha256(marker.encode()).hexdigest()[:24],
                        "force": False,
                        "origin": origin,
                        # A retry asks for the job again: with the request context it was emitted with.
                        **(
                            {"context": dict(state.in_flight.context)}
                            if origin == "retry" and state.in_flight and state.in_flight.context
                            else {}
                        ),
                    }
                ),
            )
        )
    return out
