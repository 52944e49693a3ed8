"""Errors of the projections package (``streams`` maps them onto its typed errors)."""

from __future__ import annotations


class StoreUnavailable(Exception):
    """Cassandra did not answer (down, timing out, overloaded): retry later, nothing was lost."""


class StoreRefused(StoreUnavailable):
    """Cassandra refused a write as invalid (``InvalidRequest``: a key over 64 KiB, a value it cannot take).

    Retrying gives the same answer. Where the stage can name the record at
    fault it sends that record to the dead letters and goes on; elsewhere this
    is a ``StoreUnavailable`` and is retried as before.
    """


class StageBehind(StoreUnavailable):
    """A stage that follows another (the deep index stage) is ahead of it: the batch is retried later, as after an
    outage, but this is no failure (the runner says so at info level)."""


class AnchorNotFound(LookupError):
    """session_load could not resolve its anchor; the message is the guide's error text."""


def event_not_found(event_id: str, session_id: str) -> str:
    """session_load's answer to an event id the session searched does not hold: Go's text
    (``anchor event not found: <id>``) first, then the session searched and how to load another's event
    (an agent that left out ``session_id`` searched its own session)."""
    return (
        f'anchor event not found: {event_id} in session "{session_id}" '
        "(pass session_id to load an event of another session)"
    )


def tool_call_not_found(tool_call_id: str, session_id: str) -> str:
    """session_load's answer to a tool-call id the session searched holds no result of (the guide's text)."""
    return f'tool_call_id "{tool_call_id}" not found in session "{session_id}"'


class InvalidRequest(ValueError):
    """A read request that can never succeed as given (missing anchor, bad scope...)."""


class MigrationMismatch(RuntimeError):
    """An applied migration's file changed afterwards: the keyspace no longer matches the code."""
