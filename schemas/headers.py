"""Kafka headers distill puts on summary records: part of the record contract between stages.

The worker writes them (``streams.app.headers``); the ledger, the cache and the projector read them.
"""

from __future__ import annotations

from collections.abc import Iterable

EVENTS_OFFSET = "distill-events-offset"
"""Events-topic offset (same partition) of the last event the summary covers."""
INPUT_HASH = "distill-input-hash"
"""Content address of the summary's inputs (previous summary, delta, prompt, model)."""


def header(headers: Iterable[tuple[str, bytes]] | None, name: str) -> str | None:
    for key, value in headers or ():
        if key == name and value is not None:
            return value.decode()
    return None


def header_int(headers: Iterable[tuple[str, bytes]] | None, name: str) -> int | None:
    value = header(headers, name)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
