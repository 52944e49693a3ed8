"""The batch producer against the real broker: every record lands, in order per partition, at the offsets it reports."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from schemas.settings import Settings
from streams.app.batch_produce import OrderedBatchSender, send_in_batches
from streams.clients.kafka_config import consumer_kwargs, producer_kwargs
from streams.clients.topics_admin import ensure_topics

pytestmark = pytest.mark.integration


async def test_records_land_in_order_at_the_reported_offsets(isolated_settings: Settings) -> None:
    settings = isolated_settings
    await ensure_topics(settings)
    topic = settings.topics.events
    partitions = settings.topics.partitions
    assert partitions >= 2
    # A small batch size: the 600 records need many batches per partition (and a record
    # larger than the batch goes alone); tombstones and CJK values ride along.
    producer = AIOKafkaProducer(**{**producer_kwargs(settings.kafka), "max_batch_size": 2048})
    await producer.start()
    records: list[tuple[str, bytes, bytes | None, int]] = []
    for n in range(600):
        value = None if n % 50 == 7 else f"record {n} 记录 {'x' * (5000 if n == 301 else 20)}".encode()
        records.append((topic, f"k{n % 13}".encode(), value, n % partitions))
    try:
        sent = await send_in_batches(producer, records)
        for batch in sent:
            await batch.delivered
    finally:
        await producer.stop()
    assert sum(b.records for b in sent) == len(records)
    assert len([b for b in sent if b.partition == 0]) > 3  # several batches per partition

    consumer = AIOKafkaConsumer(**consumer_kwargs(settings.kafka), enable_auto_commit=False, group_id=None,
                                auto_offset_reset="earliest")  # fmt: skip
    await consumer.start()
    try:
        got: dict[int, list[tuple[int, bytes | None, bytes | None]]] = {p: [] for p in range(partitions)}
        tps = [TopicPartition(topic, p) for p in got]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        while sum(map(len, got.values())) < len(records):
            for tp, msgs in (await consumer.getmany(timeout_ms=2000)).items():
                got[tp.partition] += [(m.offset, m.key, m.value) for m in msgs]
    finally:
        await consumer.stop()
    for p, rows in got.items():
        assert [(k, v) for _, k, v in rows] == [(k, v) for _, k, v, q in records if q == p]
        last = {b.last_offset() for b in sent if b.partition == p}
        ends: list[int] = []
        count = 0
        for b in (b for b in sent if b.partition == p):
            count += b.records
            ends.append(rows[count - 1][0])
        assert sorted(last) == ends  # each batch's reported last offset is its last record's


async def test_calls_reach_a_partition_in_the_order_they_were_made(isolated_settings: Settings) -> None:
    """A call held up behind a lingering batch is not overtaken by the next call (the two agents' changelog)."""
    settings = isolated_settings
    await ensure_topics(settings)
    topic = settings.topics.events
    # Batches linger 300 ms: the first call's first group waits behind the batch already pending there.
    producer = AIOKafkaProducer(**{**producer_kwargs(settings.kafka), "linger_ms": 300})
    await producer.start()
    done: list[tuple[int, int]] = []
    sender = OrderedBatchSender(lambda: producer)
    try:
        lingering = await producer.send(topic, b"someone else's", key=b"x", partition=1)
        first = asyncio.ensure_future(
            sender.queue(
                [(topic, b"job", b"a job", 1), (topic, b"K", "v1 第一".encode(), 0)],
                lambda b, f: done.append((b.partition, b.records)),
            )
        )
        await asyncio.sleep(0.05)
        assert not first.done()  # waiting for partition 1's pending batch to drain
        second = asyncio.ensure_future(
            sender.queue([(topic, b"K", "v2 第二".encode(), 0)], lambda b, f: done.append((b.partition, b.records)))
        )
        for batch in [*await first, *await second]:
            await batch.delivered
        await lingering
    finally:
        await producer.stop()
    assert sorted(done) == [(0, 1), (0, 1), (1, 1)]  # every queued batch got its callback
    consumer = AIOKafkaConsumer(**consumer_kwargs(settings.kafka), enable_auto_commit=False, group_id=None,
                                auto_offset_reset="earliest")  # fmt: skip
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        values = [m.value for m in (await consumer.getmany(tp, timeout_ms=5000)).get(tp, [])]
    finally:
        await consumer.stop()
    # Without the order, the second call's write landed first: a recovery would restore v1.
    assert values == ["v1 第一".encode(), "v2 第二".encode()]
