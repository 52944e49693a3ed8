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


async def test_a_batch_for_a_topic_known_from_a_full_metadata_fetch_is_delivered_once_another_topic_is_tracked(
    isolated_settings: Settings,
) -> None:
    """The replay stall: a worker's producer learned its jobs topic from a fetch of every topic's metadata
    (Faust forces one after each topic it creates), queued its first jobs there and, before they went out,
    sent to a topic created later (the changelog). aiokafka then tracked only that topic: its next metadata
    answers lacked the jobs topic, whose batch waited with no leader until it expired (Faust: 20 minutes)."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    from streams.clients.kafka_config import common_kwargs

    settings = isolated_settings
    await ensure_topics(settings)
    later = f"{settings.topics.events.rsplit('.', 1)[0]}.later"
    # A short request timeout: on failure the stuck batch expires and the producer stops soon.
    producer = AIOKafkaProducer(**{**producer_kwargs(settings.kafka), "request_timeout_ms": 5000})
    admin = AIOKafkaAdminClient(**common_kwargs(settings.kafka))
    await producer.start()
    await admin.start()
    try:
        await producer.client.force_metadata_update()  # nothing tracked yet: every topic's metadata
        jobs = TopicPartition(settings.topics.jobs, 0)
        assert producer.client.cluster.leader_for_partition(jobs) is not None
        await admin.create_topics([NewTopic(later, 1, 1)])
        # A request in flight to the broker holds a batch back; muting its partition does the same here.
        producer._sender._muted_partitions.add(jobs)
        try:
            (queued,) = await send_in_batches(producer, [(jobs.topic, b"k", b"job", jobs.partition)])
            # The later topic is missing from the metadata: this send tracks it, and the answer is read.
            await producer.send_and_wait(later, b"changelog", partition=0)
            leader, tracked = producer.client.cluster.leader_for_partition(jobs), sorted(producer.client._topics)
        finally:
            producer._sender._muted_partitions.discard(jobs)
        assert later in tracked
        assert leader is not None, f"the jobs topic left the producer's metadata (tracked: {tracked})"
        await producer.send_and_wait(later, b"wake the sender", partition=0)
        await asyncio.wait_for(queued.delivered, 60)  # a bound on a hang, not a timing: it goes out at once
    finally:
        await admin.close()
        await producer.stop()
