"""The worker's memory of each session's event ids (``schemas.event_ids``): what the track stage judges a
record by, and where it comes from.

The projector keeps each id's first digest in ``event_ids``; the worker's source of truth is the log.
:class:`~schemas.event_ids.FirstDigests` remembers the sessions of the records the track agent judged in
this process (bounded, least recently used out). A session it does not know — its records before the
ones being judged were folded by another process, before a restart or a rebalance, or it was forgotten
— is learnt from the log once: its records from its first offset (the track state's ``first_offset``,
reset by a ``delete_session``) up to the record being judged, read like a job's delta
(:class:`~streams.app.event_log.EventLogReader`, its buffer of recent records first). A session that
starts in the batch costs nothing. So the worker's memory survives a restart and a rebalance without a
table of its own: nothing is written per event.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from schemas import SessionEvent, SessionKey
from schemas.event_ids import FirstDigests, first_digests, record_digest
from streams.app.decoding import decode_event_record
from streams.app.event_log import RawEvent


class LogReader(Protocol):
    async def read_keys(self, partition: int, ranges: Sequence[tuple[int, int, bytes]]) -> list[list[RawEvent]]: ...


@dataclass(frozen=True)
class Unknown:
    """A session the memory must learn before the record at ``end + 1`` is judged: its records with ``key``
    at ``start..end`` of ``partition``."""

    partition: int
    session: SessionKey
    start: int
    end: int
    key: bytes


def digests_in(raw: Iterable[RawEvent], session: SessionKey, max_record_bytes: int | None) -> dict[str, str]:
    """Event id → first digest of ``session``'s events among ``raw`` (records of one key, in log order), as the
    track stage took them: records it refuses as undecodable (or oversized) hold no event."""
    found: list[tuple[str, str]] = []
    for item in raw:
        # The track agent's decode of the record, where the buffer of recent records still holds it.
        record = item.event if item.event is not None else decode_event_record(item.value, max_record_bytes)
        if isinstance(record, SessionEvent) and record.session_key == session:
            found.append((record.event_id, record_digest(item.value)))
    return first_digests(found)


async def learn(
    digests: FirstDigests, reader: LogReader, unknown: Sequence[Unknown], max_record_bytes: int | None
) -> None:
    """Read each of ``unknown`` from the log and remember it: one read per partition (its stretch of the log
    from the earliest start scanned once for all its sessions: after a restart every active session is
    unknown), the partitions concurrently."""
    if not unknown:
        return
    by_partition: dict[int, list[Unknown]] = {}
    for u in unknown:
        by_partition.setdefault(u.partition, []).append(u)
    groups = list(by_partition.items())
    reads = await asyncio.gather(
        *(reader.read_keys(partition, [(u.start, u.end, u.key) for u in group]) for partition, group in groups)
    )
    for (_, group), found in zip(groups, reads, strict=True):
        for u, raw in zip(group, found, strict=True):
            digests.learn(u.partition, u.session, digests_in(raw, u.session, max_record_bytes))


__all__ = ["LogReader", "Unknown", "digests_in", "learn"]
