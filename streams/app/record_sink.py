"""Batch-native delivery of one topic's records: raw messages to one consumer, no per-record Faust event.

Faust hands every fetched record to the conductor, which (per record) takes a
lock, waits on flow control and the producer buffer, decodes key and value
through the serializer registry, builds an ``Event`` and puts it on each
subscribed agent's queue; the agent's stream then takes it, tracks it, sets the
current event and acks it. For the events topic — every record the worker sees,
one agent — that machinery cost more CPU than the track rules themselves.

A :class:`RecordSink` takes the topic's raw messages straight from the drain
loop (``BatchDrainConsumer._deliver``, after its rebalance and read-offset
rules) and hands them to its one reader in batches:

* backpressure as Faust's: a :class:`~mode.utils.queues.FlowControlQueue` of
  ``maxsize`` records; past its high mark the record's partition leaves the
  fetch (``consumer.on_buffer_full``) and rejoins once it drains
  (``on_buffer_drop``); a full queue blocks the put;
* cleared with the agent queues when flow control resumes after a rebalance
  (``clear_on_resume``): its records were never tracked nor acked, and the new
  assignment fetches them again from the committed offset;
* the reader tracks what it takes (:meth:`track`: pending ack, so a stop waits
  for it, and the stream's inbound time for Faust's "stream not processing"
  check) and acks each record itself once its writes are on the broker.
"""

from __future__ import annotations

from collections.abc import Callable
from time import monotonic
from typing import Any

from faust.types import TP
from mode.utils.queues import FlowControlQueue

EBB_EVERY = 256
"""Records put between two looks at Faust's producer buffer (:meth:`RecordSink.put`)."""


class RecordSink:
    """Raw messages of one topic, queued for one batch reader (see the module)."""

    def __init__(self, app: Any, maxsize: int) -> None:
        if maxsize < 2:
            raise ValueError(f"maxsize must be at least 2, got {maxsize}")
        self.app = app
        self.queue: FlowControlQueue[Any] = FlowControlQueue(
            maxsize, flow_control=app.flow_control, clear_on_resume=True
        )
        self._pressure: dict[Any, tuple[Callable[[], None], Callable[[], None]]] = {}
        self._until_ebb = 0  # the first record looks at the producer buffer
        self.on_take: Callable[[], None] | None = None
        """Called once the reader took a batch (``IngestFirst.taken``: jobs waiting for it go on)."""

    def waiting(self) -> bool:
        """Whether records wait for the reader."""
        return not self.queue.empty()

    def _callbacks(self, tp: Any) -> tuple[Callable[[], None], Callable[[], None]]:
        # One pair per partition: the queue keeps pending drop callbacks in a set (by identity).
        pair = self._pressure.get(tp)
        if pair is None:
            consumer = self.app.consumer
            # Faust's own TP: the consumer's partition sets assert it (aiokafka's TopicPartition equals it).
            own = TP(tp.topic, tp.partition)
            pair = self._pressure[tp] = (lambda: consumer.on_buffer_full(own), lambda: consumer.on_buffer_drop(own))
        return pair

    def offer(self, tp: Any, message: Any) -> bool:
        """Queue ``message`` if :meth:`put` would not wait for it; ``False``: nothing done, call ``put``.

        The drain loop's common case without a coroutine per record: flow active, no look at
        the producer buffer due, room in the queue.
        """
        if self._until_ebb <= 1 or not self.app.flow_control.is_active():
            return False
        queue = self.queue
        if queue.full():
            return False
        self._until_ebb -= 1
        high, drop = self._callbacks(tp)
        queue.put_nowait_enhanced(message, on_pressure_high=high, on_pressure_drop=drop)
        return True

    async def put(self, tp: Any, message: Any) -> None:
        """Queue ``message`` (of partition ``tp``); waits while flow is suspended or the queue is full.

        Also waits, as Faust's conductor does, while Faust's producer buffer is over its limit, but
        looks at it once per :data:`EBB_EVERY` records, not per record: computing its size went
        through Faust's settings registry each time (~5 % of a saturated worker's CPU), and this
        topic's records never fill it (the track agent sends its writes itself).
        """
        flow = self.app.flow_control
        if not flow.is_active():
            await flow.acquire()
        self._until_ebb -= 1
        if self._until_ebb <= 0:
            self._until_ebb = EBB_EVERY
            await self.app.producer.buffer.wait_until_ebb()
        queue = self.queue
        high, drop = self._callbacks(tp)
        if not queue.full():
            queue.put_nowait_enhanced(message, on_pressure_high=high, on_pressure_drop=drop)
            return
        # Full: the partition leaves the fetch as past the high mark, its resume queued with the
        # others (else a partition whose first record met a full queue would never be fetched again).
        if queue.in_pressure_high_state(drop):
            high()
        await queue.put(message)

    async def take(self, max_size: int) -> list[Any]:
        """The next batch: waits for one record, then whatever else is queued, up to ``max_size``."""
        queue = self.queue
        batch = [await queue.get()]
        while len(batch) < max_size and not queue.empty():
            batch.append(queue.get_nowait())
        if self.on_take is not None:
            self.on_take()
        return batch

    def track(self, messages: list[Any]) -> None:
        """Mark ``messages`` pending ack (as Faust's stream does when it takes a record)."""
        consumer = self.app.consumer
        inbound = self.app.monitor.stream_inbound_time
        now = monotonic()
        for message in messages:
            message.tracked = True
            consumer.track_message(message)
            inbound[message.tp] = now

    def ack(self, messages: list[Any]) -> None:
        """Ack ``messages`` (their offsets become committable)."""
        ack = self.app.consumer.ack
        for message in messages:
            ack(message)


__all__ = ["RecordSink"]
