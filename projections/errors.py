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


class InvalidRequest(ValueError):
    """A read request that can never succeed as given (missing anchor, bad scope...)."""


class MigrationMismatch(RuntimeError):
    """An applied migration's file changed afterwards: the keyspace no longer matches the code."""
