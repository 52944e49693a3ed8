"""A bounded pool running jobs concurrently across keys, one at a time per key, acked in order.

The Faust agent keeps ``concurrency=1`` (faust#606: higher agent concurrency
can commit an offset past an unfinished message) and hands each job to this
pool. Up to ``concurrency`` jobs run at once; jobs with the same key run one
after the other in arrival order; at most ``capacity`` jobs are held, after
which :meth:`JobPool.submit` waits (backpressure on the jobs stream only —
event ingestion is another agent and keeps flowing). Offsets are acked per
partition strictly in order: a job's offset is acked only once every earlier
job of its partition is done, so a crash never commits past an unfinished job.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)


@dataclass
class _Slot:
    offset: int
    ack: Callable[[], object]
    done: bool = False


@dataclass
class InOrderAcker:
    """Per partition, acks the longest done prefix of submitted offsets."""

    _slots: dict[int, deque[_Slot]] = field(default_factory=dict)

    def register(self, partition: int, offset: int, ack: Callable[[], object]) -> _Slot:
        slot = _Slot(offset, ack)
        self._slots.setdefault(partition, deque()).append(slot)
        return slot

    def done(self, partition: int, slot: _Slot) -> int:
        """Mark ``slot`` done; returns how many offsets were acked."""
        slot.done = True
        queue = self._slots.get(partition)
        acked = 0
        while queue and queue[0].done:
            queue.popleft().ack()
            acked += 1
        return acked

    def forget(self, partitions: set[int]) -> None:
        for p in partitions:
            self._slots.pop(p, None)

    def pending(self) -> int:
        return sum(len(q) for q in self._slots.values())


class JobPool:
    """See the module docstring."""

    def __init__(
        self,
        concurrency: int,
        capacity: int | None = None,
        on_size: Callable[[int], object] | None = None,
    ) -> None:
        """``on_size(n)`` is told the number of held jobs whenever it changes (the in-flight gauge)."""
        self.concurrency = concurrency
        self.on_size = on_size
        self._running = asyncio.Semaphore(concurrency)
        self._held = asyncio.Semaphore(capacity or concurrency * 16)
        self._tails: dict[Hashable, asyncio.Task[None]] = {}
        self._tasks: dict[asyncio.Task[None], int] = {}
        self.acker = InOrderAcker()
        self.active = 0

    def __len__(self) -> int:
        return len(self._tasks)

    async def submit(
        self,
        key: Hashable,
        partition: int,
        offset: int,
        run: Callable[[], Awaitable[None]],
        ack: Callable[[], object],
    ) -> None:
        """Queue ``run`` behind the previous job of ``key``; ``ack`` is called in offset order."""
        await self._held.acquire()
        slot = self.acker.register(partition, offset, ack)
        previous = self._tails.get(key)
        task = asyncio.ensure_future(self._run(key, partition, slot, previous, run))
        self._tails[key] = task
        self._tasks[task] = partition
        self._size_changed()

    def _size_changed(self) -> None:
        if self.on_size is not None:
            self.on_size(len(self._tasks))

    async def _run(
        self,
        key: Hashable,
        partition: int,
        slot: _Slot,
        previous: asyncio.Task[None] | None,
        run: Callable[[], Awaitable[None]],
    ) -> None:
        me = asyncio.current_task()
        try:
            if previous is not None and not previous.done():
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(previous)
            async with self._running:
                self.active += 1
                try:
                    await run()
                finally:
                    self.active -= 1
            self.acker.done(partition, slot)
        finally:
            self._held.release()
            if me is not None:
                self._tasks.pop(me, None)
                if self._tails.get(key) is me:
                    del self._tails[key]
            self._size_changed()

    async def drain(self, partitions: set[int] | None = None, timeout: float = 10.0) -> None:
        """Wait for the jobs of ``partitions`` (all when ``None``), cancelling after ``timeout``."""
        tasks = [t for t, p in self._tasks.items() if partitions is None or p in partitions]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=timeout)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=timeout)
        self.acker.forget(partitions if partitions is not None else set(self.acker._slots))
