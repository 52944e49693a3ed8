"""Errors of the projections package (``streams`` maps them onto its typed errors)."""

from __future__ import annotations


class StoreUnavailable(Exception):
    """Cassandra did not answer (down, timing out, overloaded): retry later, nothing was lost."""


class AnchorNotFound(LookupError):
    """session_load could not resolve its anchor; the message is the guide's error text."""


class InvalidRequest(ValueError):
    """A read request that can never succeed as given (missing anchor, bad scope...)."""


class MigrationMismatch(RuntimeError):
    """An applied migration's file changed afterwards: the keyspace no longer matches the code."""
