"""Kafka headers distill puts on summary records (read back by the ledger and the cache)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

EVENTS_OFFSET = "distill-events-offset"
"""Events-topic offset (same partition) of the last event the summary covers."""
INPUT_HASH = "distill-input-hash"
"""Content address of the summary's inputs (previous summary, delta, prompt, model)."""

Headers = Sequence[tuple[str, bytes]]


def summary_headers(events_offset: int | None, input_hash: str | None) -> list[tuple[str, bytes]]:
    out: list[tuple[str, bytes]] = []
    if events_offset is not None:
        out.append((EVENTS_OFFSET, str(events_offset).encode()))
    if input_hash:
        out.append((INPUT_HASH, input_hash.encode()))
    return out


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
