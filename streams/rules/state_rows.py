"""Positional (row) form of :class:`SessionTriggerState`: the compact changelog encoding.

Every event changes its key's state, and every change is a changelog record,
so encoding sits on the ingest path. The row is a JSON array in a fixed field
order; pending entries, the in-flight job and open calls are tuples that the
C JSON encoder writes as arrays directly (no per-entry dict or list is built),
and field names are not repeated in every record.

A 13th field, ``[failures in a row, their anchor, learned window]``, is
written only while a key has one (rows without it read as no failures), so
rows of keys that never failed keep the 12-field layout older builds read.
A 14th, ``[decided event id, queued jobs]`` (the decided boundary and the jobs
queued behind the in-flight one), is written once a key has decided a job
(the 13th is then ``null`` when the key has no failures). A 15th, the
summaries-topic offset of the session's last epoch switch, only once there was
one (the 13th and 14th are then ``null`` when empty). A 16th, the summaries-topic
offset of the last answer applied to the key (``answered_at``), once it had one
read with its offset (the 13th to 15th are then ``null`` when empty). A 17th, the events-topic
offset of the session's last ``delete_session`` (``deleted_at``), once one was folded (the 13th
to 16th are then ``null`` when empty).

``ROW_FORMAT`` versions the layout; the object form of
:func:`~streams.rules.trigger_state.to_dict` (format 1) stays readable.
:func:`state_from_row` validates what it reads and raises
:class:`CorruptTriggerStateError` naming the part that is unreadable.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from streams.rules.counters import Activity, Counters, PendingEvent
from streams.rules.errors import CorruptTriggerStateError
from streams.rules.trigger_state import (
    Scope,
    SessionTriggerState,
    decided_in,
    decided_row,
    failure_in,
    failure_row,
    flight_in,
    flight_row,
    offset_in,
    with_decided,
)

ROW_FORMAT = 2
"""Layout of :func:`state_to_row` (1 is the object form of ``to_dict``)."""

_PARTS = (
    "app_name",
    "user_id",
    "session_id",
    "filter_key",
    "version",
    "boundary event id",
    "boundary timestamp",
    "pending index",
    "own scope",
    "branch scopes",
    "in-flight job",
    "high offset",
    "failure cooldown",
    "decided boundary",
    "epoch switch offset",
    "answers offset",
    "deletion offset",
)
_BASE_FIELDS = len(_PARTS) - 5
_STRINGS = range(4)


def state_to_row(state: SessionTriggerState) -> list[Any]:
    """The state as a JSON-ready list (tuples inside are written as arrays)."""
    row = [
        state.app_name,
        state.user_id,
        state.session_id,
        state.filter_key,
        state.version,
        state.boundary_event_id,
        state.boundary_ts,
        state.pending,
        _scope_row(state.own),
        {k: _scope_row(s) for k, s in state.scopes.items()} if state.scopes else None,
        flight_row(state.in_flight) if state.in_flight is not None else None,
        state.high_offset,
    ]
    decided = state.decided_id is not None or state.queued
    deleted = state.deleted_at is not None
    answered = deleted or state.answered_at is not None
    adopted = answered or state.adopted_at is not None
    if adopted or decided or state.failed is not None or state.learned_window is not None:
        row.append(failure_row(state) if state.failed is not None or state.learned_window is not None else None)
    if adopted or decided:
        row.append(decided_row(state) if decided else None)
    if adopted:
        row.append(state.adopted_at)
    if answered:
        row.append(state.answered_at)
    if deleted:
        row.append(state.deleted_at)
    return row


def state_from_row(row: Any) -> SessionTriggerState:
    """Read :func:`state_to_row` back (after a JSON round trip); see the module docstring."""
    if not isinstance(row, list) or not _BASE_FIELDS <= len(row) <= len(_PARTS):
        raise CorruptTriggerStateError(f"trigger state row must be a list of {_BASE_FIELDS} to {len(_PARTS)} fields")
    part = 0
    try:
        for part in _STRINGS:
            if not isinstance(row[part], str):
                raise TypeError(f"expected a string, got {type(row[part]).__name__}")
        part = 4
        if not isinstance(row[4], int):
            raise TypeError(f"expected an integer, got {type(row[4]).__name__}")
        part = 7
        pending = [PendingEvent(*p) for p in row[7]]
        part = 8
        own = _scope_in(row[8])
        part = 9
        scopes = {k: _scope_in(s) for k, s in (row[9] or {}).items()}
        part = 10
        in_flight = flight_in(row[10]) if row[10] else None
        part = 12
        failed, window = failure_in(row[12] if len(row) > _BASE_FIELDS else None)
        part = 13
        decided_id, queued = decided_in(row[13] if len(row) > _BASE_FIELDS + 1 else None)
        part = 14
        adopted_at = offset_in(row[14] if len(row) > _BASE_FIELDS + 2 else None)
        part = 15
        answered_at = offset_in(row[15] if len(row) > _BASE_FIELDS + 3 else None)
        part = 16
        deleted_at = offset_in(row[16] if len(row) > _BASE_FIELDS + 4 else None)
    except (TypeError, ValueError, IndexError, AttributeError) as exc:
        ids = "/".join(str(x) for x in row[:3])
        raise CorruptTriggerStateError(f"trigger state {ids} key {row[3]!r}: malformed {_PARTS[part]}: {exc}") from exc
    state = SessionTriggerState(
        row[0],
        row[1],
        row[2],
        row[3],
        row[4],
        row[5],
        row[6],
        pending,
        0,
        own,
        scopes,
        in_flight,
        row[11],
        failed,
        window,
    )
    state.adopted_at = adopted_at
    state.answered_at = answered_at
    state.deleted_at = deleted_at
    return with_decided(state, decided_id, queued)


def _scope_row(scope: Scope) -> tuple[Any, ...]:
    c, a = scope.counters, scope.activity
    return (
        (c.events, c.tokens, c.rounds, c.max_text_len, c.keywords),
        (a.last_ts, a.last_request_id, a.request_id, a.request_started, a.gap, a.open_calls, a.model, a.context_window),
    )


def _scope_in(data: Sequence[Any]) -> Scope:
    c, a = data
    if len(a) != 8:
        raise ValueError(f"activity has {len(a)} fields, expected 8")
    return Scope(Counters(*c), Activity(a[0], a[1], a[2], a[3], a[4], tuple(a[5]), a[6], a[7]))
