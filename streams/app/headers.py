"""Kafka headers distill puts on summary records (read back by the ledger and the cache)."""

from __future__ import annotations

from collections.abc import Sequence

from schemas.headers import EVENTS_OFFSET, INPUT_HASH, header, header_int

Headers = Sequence[tuple[str, bytes]]


def summary_headers(events_offset: int | None, input_hash: str | None) -> list[tuple[str, bytes]]:
    out: list[tuple[str, bytes]] = []
    if events_offset is not None:
        out.append((EVENTS_OFFSET, str(events_offset).encode()))
    if input_hash:
        out.append((INPUT_HASH, input_hash.encode()))
    return out


__all__ = ["EVENTS_OFFSET", "INPUT_HASH", "Headers", "header", "header_int", "summary_headers"]
