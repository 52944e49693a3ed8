"""Batches of whatever is already waiting: no timer, no added latency.

The track agent folds records in batches (one changelog record per changed key
per batch, one producer hand-off per batch). Faust's ``take_events`` fills a
batch until it is full or a timer runs out, so an event arriving on an idle
worker waits for the timer, and a busy one pays a timer and a buffer hand-off
per batch. Here a batch ends as soon as nothing else is waiting in the
agent's input queue: on an idle worker every event is processed at once; under
load, everything that queued up while the previous batch was processed becomes
the next batch, up to ``max_size``.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Callable, Sequence
from typing import Any, TypeVar

E = TypeVar("E")


async def backlog_batches(
    events: AsyncIterable[E], backlog: Callable[[], int], max_size: int
) -> AsyncIterator[list[E]]:
    """Group ``events`` into lists that end when ``backlog()`` is 0 or at ``max_size`` items.

    ``backlog()`` is how many items ``events`` can hand over without waiting
    (the length of the queue behind it). Each batch is a new list; items are
    never dropped or reordered.
    """
    if max_size < 1:
        raise ValueError(f"max_size must be at least 1, got {max_size}")
    batch: list[E] = []
    async for event in events:
        batch.append(event)
        if len(batch) >= max_size or not backlog():
            yield batch
            batch = []
    if batch:
        yield batch


def current_generation(events: Sequence[Any], generation_id: int | None) -> list[Any]:
    """The events of ``events`` fetched under consumer generation ``generation_id``.

    A batch can straddle a rebalance (it was held while Faust cleared the agent
    queues): records fetched under an earlier generation belong to the previous
    assignment, and whoever owns their partition now re-reads them from the
    committed offset. Faust's own stream skips such records without acking them.
    """
    return [e for e in events if e.message.generation_id == generation_id]
