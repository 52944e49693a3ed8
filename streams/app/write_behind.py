"""A small batch's table writes held back briefly, sent with the next ones: one produce per few fetch cycles.

At a low event rate every fetch cycle of the track agent (a dozen events) wrote its
changelog records in a produce request of its own and waited for the broker's answer: a
request to encode, an answer to decode, a batch future per partition, and one more wake-up
of the event loop per cycle, the answer's (issue 14: per cycle the loop otherwise wakes once,
for the fetched records). Most such batches write nothing but changelog records, and nothing
waits for those but the batch's acks.

:class:`WriteBehind` holds such records (and the messages whose acks wait for them) for up
to ``hold_s`` and sends them ahead of the next records that go out: with a write that comes
once half the hold is over (a steady stream: one send per ``hold_s / 2`` or so, no timer
fires) or, at the latest, when the hold is over (a timer). Every guarantee stays:

* a message is acked only once everything its batch wrote is on the broker (its records
  are sent, in order, with or before the records of any later write);
* order: held records go out first, in the order they were written, in the same call as
  the next write's records (``send`` keeps a call's order, and calls in the order made);
* a batch with anything else to send (a job, a reply, a dead letter) is not held: its own
  records and every held one go out at once, so no job waits for a hold;
* nothing is held while ``must_send()`` (a rebalance, stopped flow) and a hold never
  outlives ``hold_s`` (a timer sends it);
* a revocation sends what is held before Faust flushes its producer and commits, so the rows
  are on the broker before another worker recovers the table from its changelog (never after
  its own writes); a stop drops them before the consumer leaves the group: their messages
  were never acked, so whoever reads the partitions next folds those events again onto the
  changelog's state (:func:`install`);
* a failed send of held records calls ``on_error`` (the worker stops, and its unacked
  records are delivered again), as a failed send in the agent does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from streams.app.batch_produce import OutgoingRecord

log = logging.getLogger(__name__)

HOLD_MOST = 256
"""Records held at most: a larger batch (a backlog) is sent at once, as before."""


class WriteBehind:
    """See the module. ``send(records)`` returns once the broker has them all (raises if not);
    ``ack(messages)`` acks messages; ``on_error(exc)`` is awaited when a timed send fails."""

    def __init__(
        self,
        send: Callable[[list[OutgoingRecord]], Awaitable[None]],
        ack: Callable[[list[Any]], None],
        hold_s: float,
        on_error: Callable[[BaseException], Awaitable[Any]],
        must_send: Callable[[], bool] = lambda: False,
        most: int = HOLD_MOST,
    ) -> None:
        self._send = send
        self._ack = ack
        self.hold_s = hold_s
        self._on_error = on_error
        self._must_send = must_send
        self.most = most
        self._records: list[OutgoingRecord] = []
        self._messages: list[Any] = []
        self._since: float | None = None  # loop time of the oldest held write
        self._timer: asyncio.TimerHandle | None = None
        self._due_task: asyncio.Task[None] | None = None
        self.sends = 0
        """Produce calls made (for tests and benchmarks)."""

    def held(self) -> int:
        """Records held now."""
        return len(self._records)

    async def write(self, records: Sequence[OutgoingRecord], messages: Sequence[Any] = (), *, hold: bool) -> None:
        """Send ``records`` (after the held ones) and ack ``messages`` once they are on the broker.

        ``hold``: ``records`` may wait up to ``hold_s`` for the next write (call it only when they
        are table writes that nothing but ``messages``' acks waits for). Returns once they are sent
        and acked, or held.
        """
        self._records.extend(records)
        self._messages.extend(messages)
        if not self._records and not self._messages:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self._since is None:
            self._since = now
        # Past half its hold the next write would likely come after the timer: send with this one
        # (in a steady stream the timer then never fires, a wake-up of its own).
        if (
            not hold
            or self.hold_s <= 0
            or len(self._records) >= self.most
            or now - self._since >= self.hold_s / 2
            or self._must_send()
        ):
            await self.flush()
            return
        if self._timer is None:
            self._timer = loop.call_at(self._since + self.hold_s, self._due)

    async def flush(self) -> None:
        """Send what is held now and ack its messages (raises if the send fails: nothing is acked)."""
        records, messages = self._records, self._messages
        self._records, self._messages, self._since = [], [], None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if records:
            self.sends += 1
            await self._send(records)
        if messages:
            self._ack(messages)

    def discard(self) -> None:
        """Drop what is held, unsent and unacked (the worker stops: its records are delivered again)."""
        self._records, self._messages, self._since = [], [], None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _due(self) -> None:
        self._timer = None
        self._due_task = asyncio.get_running_loop().create_task(self._flush_due())

    async def _flush_due(self) -> None:
        try:
            await self.flush()
        except Exception as exc:
            log.exception("sending held table writes failed; stopping the worker")
            await self._on_error(exc)


def check_faust(revoke_source: str, stop_source: str) -> None:
    """Raise ``RuntimeError`` unless Faust's revocation flushes the producer through ``_producer_flush``
    and its stop stops the consumer through ``_stop_consumer`` (what :func:`install` hooks)."""
    if "await T(self._producer_flush)(on_timeout)" not in revoke_source:
        raise RuntimeError("faust's App._on_partitions_revoked changed: re-check streams.app.write_behind")
    if "await self._stop_consumer()" not in stop_source:
        raise RuntimeError("faust's App.on_stop changed: re-check streams.app.write_behind")


def install(app: Any, writes: WriteBehind) -> None:
    """Send ``writes``' held rows when a rebalance revokes partitions, before ``app`` flushes its producer
    and commits; drop them when ``app`` stops, before its consumer leaves the group (see the module)."""
    import inspect

    import faust

    check_faust(inspect.getsource(faust.App._on_partitions_revoked), inspect.getsource(faust.App.on_stop))
    producer_flush = app._producer_flush
    stop_consumer = app._stop_consumer

    async def _producer_flush(logger: Any) -> None:
        if not app.should_stop:  # a failed send raises: Faust's revocation crashes the app, nothing acked
            await writes.flush()
        await producer_flush(logger)

    async def _stop_consumer() -> None:
        writes.discard()
        await stop_consumer()

    app._producer_flush = _producer_flush
    app._stop_consumer = _stop_consumer


__all__ = ["HOLD_MOST", "WriteBehind", "install"]
