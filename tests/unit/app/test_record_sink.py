"""Batch-native delivery of the events topic: Faust's backpressure, rebalance clearing and ack bookkeeping kept."""

from __future__ import annotations

import asyncio
from typing import Any

import faust
import pytest
from aiokafka import TopicPartition
from faust.types import TP
from faust.types.tuples import Message

from streams.app.batch_drain import BatchDrainConsumer, install, route
from streams.app.record_sink import EBB_EVERY, RecordSink

EVENTS = "events"
OTHER = "jobs"


def _app() -> tuple[Any, Any]:
    app: Any = faust.App("record-sink-unit", broker="kafka://127.0.0.1:1", store="memory://", autodiscover=False)
    install(app)
    consumer = app.consumer
    assert isinstance(consumer, BatchDrainConsumer)
    app.topics._acking_topics.update({EVENTS, OTHER})
    consumer.resume_flow()
    app.flow_control.resume()
    return app, consumer


def _records(topic: str, *offsets: int, partition: int = 0) -> list[tuple[Any, Message]]:
    # getmany's partitions are aiokafka's TopicPartition (equal to Faust's TP, but not a TP instance).
    tp = TopicPartition(topic, partition)
    return [
        (tp, Message(topic, partition, o, 0.0, 0, None, b"k", b"v%d" % o, None, tp=tp, generation_id=0))
        for o in offsets
    ]


async def test_the_routed_topic_goes_to_the_sink_in_order_and_others_to_the_conductor() -> None:
    app, consumer = _app()
    sink = RecordSink(app, 100)
    route(app, EVENTS, sink)
    conducted: list[tuple[str, int]] = []

    async def callback(message: Message) -> None:
        conducted.append((message.topic, message.offset))

    consumer.callback = callback
    await consumer._deliver_batch([*_records(EVENTS, 1, 2), *_records(OTHER, 7), *_records(EVENTS, 3)])
    assert conducted == [(OTHER, 7)]
    assert [m.offset for m in await sink.take(10)] == [1, 2, 3]
    assert consumer._read_offset[TP(EVENTS, 0)] == 3  # read offsets move as for any delivered record


async def test_take_returns_what_is_queued_up_to_the_batch_size() -> None:
    app, consumer = _app()
    sink = RecordSink(app, 100)
    route(app, EVENTS, sink)
    await consumer._deliver_batch(_records(EVENTS, *range(5)))
    assert [m.offset for m in await sink.take(3)] == [0, 1, 2]
    assert [m.offset for m in await sink.take(3)] == [3, 4]


async def test_the_sink_says_whether_records_wait_and_tells_each_take() -> None:
    app, consumer = _app()
    sink = RecordSink(app, 100)
    takes: list[bool] = []
    sink.on_take = lambda: takes.append(sink.waiting())
    route(app, EVENTS, sink)
    assert not sink.waiting()
    await consumer._deliver_batch(_records(EVENTS, *range(5)))
    assert sink.waiting()
    await sink.take(3)
    await sink.take(3)
    assert takes == [True, False] and not sink.waiting()


async def test_a_full_sink_takes_the_partition_out_of_the_fetch_until_it_drains() -> None:
    app, consumer = _app()
    tp = TP(EVENTS, 0)
    consumer._active_partitions = {tp, TP(EVENTS, 1)}
    sink = RecordSink(app, 10)  # high mark 8, drop mark 4
    route(app, EVENTS, sink)
    await consumer._deliver_batch(_records(EVENTS, *range(9)))
    active = consumer._get_active_partitions()  # asserts every member is a Faust TP
    assert tp not in active and TP(EVENTS, 1) in active
    assert all(type(p) is TP for p in consumer._buffered_partitions)
    await sink.take(6)
    assert tp in consumer._get_active_partitions()


async def test_flow_control_resuming_after_a_rebalance_clears_the_sink() -> None:
    app, consumer = _app()
    sink = RecordSink(app, 100)
    route(app, EVENTS, sink)
    await consumer._deliver_batch(_records(EVENTS, 1, 2))
    app.flow_control.suspend()
    app.flow_control.resume()  # what Faust does when the new assignment starts: agent queues cleared
    assert sink.queue.empty()


async def test_tracked_records_are_pending_until_acked_then_committable() -> None:
    app, consumer = _app()
    sink = RecordSink(app, 100)
    route(app, EVENTS, sink)
    await consumer._deliver_batch(_records(EVENTS, 4, 5))
    taken = await sink.take(10)
    sink.track(taken)
    assert set(consumer.unacked) == set(taken)
    assert TP(EVENTS, 0) in app.monitor.stream_inbound_time  # Faust's "stream not processing" check
    sink.ack(taken)
    assert not consumer.unacked
    assert list(consumer._acked[TP(EVENTS, 0)]) == [4, 5]


def test_route_needs_the_batch_drain_consumer() -> None:
    app: Any = faust.App("record-sink-plain", broker="kafka://127.0.0.1:1", store="memory://", autodiscover=False)
    with pytest.raises(RuntimeError, match="install"):
        route(app, EVENTS, RecordSink(app, 10))


async def test_a_partition_meeting_a_full_sink_waits_and_is_fetched_again_once_it_drains() -> None:
    app, consumer = _app()
    first, late = TP(EVENTS, 0), TP(EVENTS, 1)
    consumer._active_partitions = {first, late}
    sink = RecordSink(app, 4)
    route(app, EVENTS, sink)
    await consumer._deliver_batch(_records(EVENTS, *range(4)))  # the queue is full
    blocked = asyncio.ensure_future(consumer._deliver_batch(_records(EVENTS, 100, partition=1)))
    await asyncio.sleep(0.01)
    assert not blocked.done()
    assert late not in consumer._get_active_partitions()
    assert [m.offset for m in await sink.take(10)] == [0, 1, 2, 3]
    await asyncio.wait_for(blocked, 1)
    assert [m.offset for m in await sink.take(10)] == [100]
    assert {first, late} <= consumer._get_active_partitions()


async def test_a_put_waits_while_flow_is_suspended() -> None:
    app, consumer = _app()
    sink = RecordSink(app, 100)
    route(app, EVENTS, sink)
    app.flow_control.suspend()
    put = asyncio.ensure_future(consumer._deliver_batch(_records(EVENTS, 1)))
    await asyncio.sleep(0.01)
    assert not put.done() and sink.queue.empty()
    app.flow_control._suspend.clear()  # resume without the rebalance's queue clear
    app.flow_control._resume.set()
    await asyncio.wait_for(put, 1)
    assert [m.offset for m in await sink.take(10)] == [1]


@pytest.mark.parametrize("queued_before", [0, EBB_EVERY - 1, 3 * EBB_EVERY - 1])
async def test_puts_wait_for_a_full_producer_buffer_at_least_every_ebb_every_records(
    monkeypatch: pytest.MonkeyPatch, queued_before: int
) -> None:
    app, consumer = _app()
    sink = RecordSink(app, 10 * EBB_EVERY)
    route(app, EVENTS, sink)
    if queued_before:
        await consumer._deliver_batch(_records(EVENTS, *range(queued_before)))
    ebb = asyncio.Event()

    async def wait_until_ebb() -> None:
        await ebb.wait()

    monkeypatch.setattr(app.producer.buffer, "wait_until_ebb", wait_until_ebb)  # the buffer is over its limit
    put = asyncio.ensure_future(consumer._deliver_batch(_records(EVENTS, *range(1000, 1000 + EBB_EVERY))))
    await asyncio.sleep(0.01)
    assert not put.done() and sink.queue.qsize() < queued_before + EBB_EVERY
    ebb.set()
    await asyncio.wait_for(put, 1)
    assert sink.queue.qsize() == queued_before + EBB_EVERY


async def test_records_the_sink_takes_at_once_are_delivered_without_a_race_against_stop_flow() -> None:
    """A batch of events-topic records with room in the sink is delivered without awaiting: no
    ``wait_first`` (four tasks, an ``asyncio.wait``) per fetch cycle."""
    app, consumer = _app()
    sink = RecordSink(app, 100)
    route(app, EVENTS, sink)

    async def no_race(*coros: Any) -> Any:
        for coro in coros:
            if asyncio.iscoroutine(coro):
                coro.close()
        raise AssertionError("delivered under wait_first")

    await consumer._deliver_batch(_records(EVENTS, 0))  # the sink's first record looks at the producer buffer
    consumer.wait_first = no_race
    await consumer._deliver_batch([*_records(EVENTS, 1, 2), *_records(EVENTS, 5, 6, partition=1)])
    assert [(m.partition, m.offset) for m in await sink.take(10)] == [(0, 0), (0, 1), (0, 2), (1, 5), (1, 6)]
    assert consumer._read_offset[TP(EVENTS, 0)] == 2 and consumer._read_offset[TP(EVENTS, 1)] == 6


async def test_what_must_wait_goes_on_under_the_race_in_order() -> None:
    """The first record that needs an await (here a conductor callback, a gap, a full sink) and every
    one after it are delivered as before, in order, under ``wait_first``."""
    app, consumer = _app()
    sink = RecordSink(app, 4)
    route(app, EVENTS, sink)
    conducted: list[int] = []
    raced: list[int] = []
    wait_first = consumer.wait_first

    async def counted(*coros: Any) -> Any:
        raced.append(len(coros))
        return await wait_first(*coros)

    async def callback(message: Message) -> None:
        conducted.append(message.offset)

    consumer.callback = callback
    consumer.wait_first = counted
    consumer._read_offset[TP(EVENTS, 0)] = 0
    await consumer._deliver_batch([*_records(EVENTS, 1), *_records(OTHER, 7), *_records(EVENTS, 2, 4)])
    assert conducted == [7] and raced == [2]
    assert [m.offset for m in await sink.take(10)] == [1, 2, 4]
    # The gap is registered as Faust does: through the received offset.
    assert sorted((i.begin, i.end) for i in consumer._gap[TP(EVENTS, 0)]) == [(3, 5)]
    # A full sink: the batch waits (under the race) until the reader takes, then the rest follows.
    delivering = asyncio.ensure_future(consumer._deliver_batch(_records(EVENTS, *range(5, 12))))
    taken: list[int] = []
    while len(taken) < 7:
        taken += [m.offset for m in await sink.take(10)]
    await delivering
    assert taken == list(range(5, 12)) and raced == [2, 2]
    assert consumer._read_offset[TP(EVENTS, 0)] == 11
