"""Produce a batch's records through aiokafka's batch API: one future per partition batch, not per record.

The track and absorb agents write, per batch of events, one changelog record per
changed key plus the jobs, replies and dead letters the batch made. Sent one by
one (``producer.send``), each record costs aiokafka a future, an accumulator
lookup and a ``get_running_loop`` call: about a tenth of the worker's CPU under a
backlog. Here the records are grouped by topic partition, in their order, and
appended to ``BatchBuilder`` s (``create_batch``, a C-level append each) that are
queued with ``send_batch``; the broker's answer for a batch carries its base
offset, so the offset of each record is ``base + its index`` (what the changelog's
persisted offset needs).

Each batch is closed before it is queued: aiokafka sends a closed batch at once instead of
letting it linger (``linger_ms``, 5 ms in the worker) for records that cannot come (a
call's records are all there; a closed batch takes no one else's). Lingering cost every
fetch cycle at a low rate one more wake-up of the event loop (a timer, then the produce),
and its events 5 ms of latency.

Order: within one call a partition's records keep their order. Unlike ``send``,
``send_batch`` waits while the partition has a pending batch (anyone's, lingering
for ``linger_ms``), so a call can suspend half-way; :class:`OrderedBatchSender`
queues whole calls one after the other, in the order they were made, so two
writers of the same table (the track and absorb agents) cannot overtake each
other on its changelog. Other senders' records (``producer.send``) may interleave
between a call's batches, as they could between its records before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

OutgoingRecord = tuple[str, bytes, bytes | None, int]
"""``(topic, key, value, partition)``; a ``None`` value is a tombstone."""


@dataclass(frozen=True)
class SentBatch:
    """One queued batch: where it goes, how many records it holds, and the broker's answer to come."""

    topic: str
    partition: int
    records: int
    delivered: asyncio.Future[Any]
    """Resolves to the batch's ``RecordMetadata`` (``offset``: its first record's) or fails."""

    def last_offset(self) -> int:
        """The offset of the batch's last record (once ``delivered`` is done)."""
        return int(self.delivered.result().offset) + self.records - 1


def group_by_partition(records: Iterable[OutgoingRecord]) -> dict[tuple[str, int], list[tuple[bytes, bytes | None]]]:
    """The records per ``(topic, partition)``, each group in the given order (pure)."""
    groups: dict[tuple[str, int], list[tuple[bytes, bytes | None]]] = {}
    for topic, key, value, partition in records:
        groups.setdefault((topic, partition), []).append((key, value))
    return groups


def produce_fields(records: Sequence[OutgoingRecord], producer: Any = None) -> dict[str, object]:
    """Log fields naming what ``records`` go to: their count and ``topic[partition]`` list, and with
    aiokafka's ``producer`` what its sender holds back for them (:func:`producer_state`)."""
    places = sorted({(topic, partition) for topic, _, _, partition in records})
    fields: dict[str, object] = {"records": len(records), "partitions": ",".join(f"{t}[{p}]" for t, p in places)}
    return fields if producer is None else {**fields, **producer_state(producer, records)}


def producer_state(producer: Any, records: Sequence[OutgoingRecord]) -> dict[str, object]:
    """What aiokafka's sender holds back for ``records``' partitions, for a slow-produce warning.

    The leader the client's metadata names for each partition, the nodes with a produce
    request in flight (a node's next request waits for its answer), the muted partitions and
    the batches queued per partition. Read from aiokafka's internals, defensively: a field
    that is not there is left out (the warning must never fail).
    """
    places = sorted({(topic, partition) for topic, _, _, partition in records})
    out: dict[str, object] = {}
    sender = getattr(producer, "_sender", None)
    client = getattr(producer, "client", None) or getattr(producer, "_client", None)
    cluster = getattr(client, "cluster", None)
    accumulator = getattr(producer, "_message_accumulator", None)
    batches = getattr(accumulator, "_batches", None)
    try:
        if cluster is not None:
            out["leaders"] = ",".join(f"{t}[{p}]={cluster.leader_for_partition(_tp(t, p))}" for t, p in places)
        if sender is not None:
            out["in_flight_nodes"] = ",".join(str(n) for n in sorted(getattr(sender, "_in_flight", ()) or ()))
            out["muted"] = ",".join(
                sorted(f"{tp.topic}[{tp.partition}]" for tp in getattr(sender, "_muted_partitions", ()))
            )
        if batches is not None:
            out["queued_batches"] = ",".join(f"{tp.topic}[{tp.partition}]={len(q)}" for tp, q in batches.items() if q)
    except Exception as exc:  # a diagnosis must not break the produce it describes
        out["state_error"] = f"{type(exc).__name__}: {exc}"[:200]
    return out


def _tp(topic: str, partition: int) -> Any:
    from aiokafka.structs import TopicPartition

    return TopicPartition(topic, partition)


async def send_in_batches(
    producer: Any, records: Iterable[OutgoingRecord], sent: list[SentBatch] | None = None
) -> list[SentBatch]:
    """Queue ``records`` on the aiokafka ``producer`` in as few batches as its batch size allows.

    Returns once every batch is queued (a partition's batch waits while one is
    pending for it); each is closed, so the producer sends it without lingering. Await
    each ``SentBatch.delivered`` for the broker's answer.
    Each queued batch is appended to ``sent`` (given: the caller keeps the ones
    queued before a failure). A record larger than the batch size goes alone in
    its batch (aiokafka always takes a batch's first record; the broker's own limit
    still applies).
    """
    out: list[SentBatch] = [] if sent is None else sent
    for (topic, partition), group in group_by_partition(records).items():
        batch = producer.create_batch()
        count = 0
        for key, value in group:
            if batch.append(key=key, value=value, timestamp=None) is None:  # full (append closed it)
                out.append(
                    SentBatch(topic, partition, count, await producer.send_batch(batch, topic, partition=partition))
                )
                batch, count = producer.create_batch(), 0
                if batch.append(key=key, value=value, timestamp=None) is None:  # pragma: no cover - aiokafka's rule
                    raise RuntimeError("aiokafka refused the first record of an empty batch")
            count += 1
        batch.close()  # sent at once, not after the producer's linger (see the module)
        out.append(SentBatch(topic, partition, count, await producer.send_batch(batch, topic, partition=partition)))
    return out


class OrderedBatchSender:
    """Queues calls' records one call after the other, in the order of the calls (see the module).

    Call :meth:`queue` right after the writes its records describe, with no await
    in between: the lock's waiters are served first come, first served, so the
    changelog gets the writes in the order they were applied.
    """

    def __init__(self, producer_of: Callable[[], Any]) -> None:
        self._producer_of = producer_of
        self._lock = asyncio.Lock()

    async def queue(
        self, records: Sequence[OutgoingRecord], on_done: Callable[[SentBatch, asyncio.Future[Any]], None]
    ) -> list[SentBatch]:
        """Queue ``records``; ``on_done`` is attached to every batch queued, also when a later one fails."""
        sent: list[SentBatch] = []
        try:
            async with self._lock:
                await send_in_batches(self._producer_of(), records, sent)
        finally:
            for batch in sent:
                batch.delivered.add_done_callback(partial(on_done, batch))
        return sent


__all__ = [
    "OrderedBatchSender",
    "OutgoingRecord",
    "SentBatch",
    "group_by_partition",
    "produce_fields",
    "send_in_batches",
]
