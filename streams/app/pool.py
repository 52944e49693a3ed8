"""A bounded pool running jobs concurrently across keys, one at a time per key, acked in order.

The Faust agent keeps ``concurrency=1`` (faust#606: higher agent concurrency
can commit an offset past an unfinished message) and hands each job to this
pool. Up to ``concurrency`` jobs run at once; jobs with the same key run one
after the other in arrival order; at most ``capacity`` jobs are held, after
which :meth:`JobPool.submit` waits (backpressure on the jobs stream only —
event ingestion is another agent and keeps flowing).

Guarantees:

* Acks. Offsets are acked per partition strictly in order: a job's offset is
  acked only once every earlier job of its partition is done, so a crash never
  commits past an unfinished job. A job that is cancelled, or whose ``run``
  raises, is never acked, nor is anything after it in its partition; an error
  (anything but cancellation) is logged and handed to ``on_error`` (the worker
  crashes the app, so the record is delivered again).
* Cancellation. A job cancelled while it waits for the previous job of its key
  never runs; how the previous job ended (done, failed, cancelled) does not
  matter to the next one.
* Rebalances. ``submit``'s ``valid()`` says whether the record still belongs to
  this worker's current assignment (the caller knows the consumer generations;
  from the start of a revoke it is false for the revoked assignment's records). A
  record that is not valid, even one whose submit was waiting for room, is dropped
  without being registered, run or acked (Kafka delivers it again from the
  committed offset). :meth:`JobPool.drain` waits until no job of its partitions is
  left, those that started meanwhile included: once it returns, none runs (bar one
  that ignored cancellation for the whole timeout, which is logged). After
  ``drain(None)`` (a stop) no job starts at all.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
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

    def partitions(self) -> set[int]:
        return set(self._slots)

    def pending(self) -> int:
        return sum(len(q) for q in self._slots.values())


class JobPool:
    """See the module docstring."""

    def __init__(
        self,
        concurrency: int,
        capacity: int | None = None,
        on_size: Callable[[int], object] | None = None,
        on_error: Callable[[BaseException], object] | None = None,
    ) -> None:
        """``on_size(n)`` is told the number of held jobs whenever it changes (the in-flight gauge).

        ``on_error(exc)`` is told when a job's ``run`` raises anything but cancellation (the job's
        offset, and every later one of its partition, then stays unacked). If it returns an
        awaitable (``app.crash``), that runs as a task of its own, so a drain cancelling the
        failed job's task cannot cancel it.
        """
        self.concurrency = concurrency
        self.on_size = on_size
        self.on_error = on_error
        self._running = asyncio.Semaphore(concurrency)
        self._held = asyncio.Semaphore(capacity or concurrency * 16)
        self._tails: dict[Hashable, asyncio.Task[None]] = {}
        self._tasks: dict[asyncio.Task[None], int] = {}
        self._stopping = False  # set by drain(None): no job starts any more
        self._callbacks: set[asyncio.Future[object]] = set()
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
        *,
        valid: Callable[[], bool] | None = None,
    ) -> bool:
        """Queue ``run`` behind the previous job of ``key``; ``ack`` is called in offset order.

        Waits for room first. Returns ``False``, having registered, run and acked nothing,
        when ``valid()`` is false (the record belongs to an assignment that is gone or being
        revoked) or the pool is stopping, both checked again once there is room; the record
        is delivered again from the committed offset. Returns ``True`` once queued.
        """
        if self._refused(partition, offset, valid):
            return False
        await self._held.acquire()
        if self._refused(partition, offset, valid):
            self._held.release()
            return False
        slot = self.acker.register(partition, offset, ack)
        previous = self._tails.get(key)
        task = asyncio.ensure_future(self._run(key, partition, slot, previous, run))
        self._tails[key] = task
        self._tasks[task] = partition
        self._size_changed()
        return True

    def _refused(self, partition: int, offset: int, valid: Callable[[], bool] | None) -> bool:
        if self._stopping:
            reason = "pool stopping"
        elif valid is not None and not valid():
            reason = "not of the current assignment"
        else:
            return False
        log.info("job dropped, delivered again later", extra={"partition": partition, "offset": offset,
                                                               "reason": reason})  # fmt: skip
        return True

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
                # Waits however ``previous`` ends (done, failed, cancelled); our own cancellation propagates.
                await asyncio.wait([previous])
            async with self._running:
                self.active += 1
                try:
                    await run()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    self._failed(partition, slot, exc)
                    return
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

    def _failed(self, partition: int, slot: _Slot, exc: Exception) -> None:
        log.error("job failed, its offset is never acked", exc_info=exc,
                  extra={"partition": partition, "offset": slot.offset, "error_class": type(exc).__name__})  # fmt: skip
        if self.on_error is None:
            return
        try:
            result = self.on_error(exc)
        except Exception:
            log.exception("on_error failed", extra={"partition": partition, "offset": slot.offset})
            return
        if inspect.isawaitable(result):
            callback = asyncio.ensure_future(result)
            self._callbacks.add(callback)
            callback.add_done_callback(self._callbacks.discard)

    def _tasks_of(self, partitions: set[int] | None) -> set[asyncio.Task[None]]:
        return {t for t, p in self._tasks.items() if partitions is None or p in partitions}

    async def drain(self, partitions: set[int] | None = None, timeout: float = 10.0) -> None:
        """Wait for the jobs of ``partitions`` (all, and stop the pool, when ``None``).

        Waits until no job of theirs is left: up to ``timeout``, then cancels what is left
        and waits up to ``timeout`` more. Then forgets their unacked offsets.
        """
        if partitions is None:
            self._stopping = True
        deadline = time.monotonic() + timeout
        while (tasks := self._tasks_of(partitions)) and (left := deadline - time.monotonic()) > 0:
            await asyncio.wait(tasks, timeout=left)
        deadline = time.monotonic() + timeout
        cancelled: set[asyncio.Task[None]] = set()
        while (tasks := self._tasks_of(partitions)) and (left := deadline - time.monotonic()) > 0:
            for task in tasks - cancelled:
                task.cancel()
            cancelled |= tasks
            await asyncio.wait(tasks, timeout=left)
        if tasks:
            stuck = sorted({self._tasks[t] for t in tasks})
            log.error("jobs still running after drain", extra={"jobs": len(tasks),
                      "partitions": ",".join(map(str, stuck))})  # fmt: skip
        self.acker.forget(partitions if partitions is not None else self.acker.partitions())
