"""The seek after a rebalance, against the real broker: a never-committed partition goes back to its start.

Faust drops the records fetched while its flow is stopped (a rebalance) and seeks back
to the committed offsets. aiokafka's ``seek_to_committed`` leaves a partition without a
committed offset where the fetcher left it, past the dropped records: a worker that kept
such a partition never tracked its first records (a kill test caught it as a race). Here the
race is made certain: records are fetched (and, as Faust does while its flow is stopped, not
delivered), then the worker's consumer seeks; what it fetches next must start at offset 0.

Faust's consumer thread is stood in for by the few calls the seek makes of it, each
forwarded to a real aiokafka consumer in a real group.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.structs import OffsetAndMetadata

from schemas.settings import Settings
from streams.app.batch_drain import BatchDrainConsumer
from streams.clients.kafka_config import consumer_kwargs, producer_kwargs
from streams.clients.topics_admin import ensure_topics

pytestmark = pytest.mark.integration


class _ConsumerThread:
    """What ``BatchDrainConsumer.seek_to_committed`` asks of Faust's consumer thread, on a real consumer."""

    def __init__(self, consumer: AIOKafkaConsumer) -> None:
        self.consumer = consumer

    async def seek_to_committed(self) -> Mapping[Any, int | None]:
        return await self.consumer.seek_to_committed()  # type: ignore[no-any-return]

    async def earliest_offsets(self, *partitions: Any) -> Mapping[Any, int]:
        return await self.consumer.beginning_offsets(list(partitions))  # type: ignore[no-any-return]

    async def seek_wait(self, partitions: Mapping[Any, int]) -> None:
        for tp, offset in partitions.items():
            self.consumer.seek(tp, offset)


def _worker_consumer(consumer: AIOKafkaConsumer, changelog: str) -> BatchDrainConsumer:
    worker = BatchDrainConsumer.__new__(BatchDrainConsumer)
    worker._thread = _ConsumerThread(consumer)  # type: ignore[assignment]
    worker._is_changelog_tp = lambda tp: tp.topic == changelog  # type: ignore[method-assign]
    return worker


async def _produce(settings: Settings, records: list[tuple[bytes, int]]) -> None:
    """``(value, partition)`` records on the events topic, in order."""
    producer = AIOKafkaProducer(**producer_kwargs(settings.kafka))
    await producer.start()
    try:
        for value, partition in records:
            await producer.send_and_wait(settings.topics.events, value, key=b"s", partition=partition)
    finally:
        await producer.stop()


def _group_consumer(settings: Settings) -> AIOKafkaConsumer:
    """A consumer of a new group that commits only when told (as Faust's)."""
    return AIOKafkaConsumer(**consumer_kwargs(settings.kafka), group_id=f"seek-{uuid.uuid4().hex[:8]}",
                            enable_auto_commit=False, auto_offset_reset="earliest")  # fmt: skip


async def _fetch(consumer: AIOKafkaConsumer, tp: TopicPartition, count: int) -> list[int]:
    offsets: list[int] = []
    for _ in range(20):
        batch = await consumer.getmany(tp, timeout_ms=500)
        offsets += [m.offset for m in batch.get(tp, [])]
        if len(offsets) >= count:
            break
    return offsets


async def test_records_fetched_before_a_partition_was_ever_committed_are_fetched_again(
    isolated_settings: Settings,
) -> None:
    settings = isolated_settings
    await ensure_topics(settings)
    topic = settings.topics.events
    fresh, committed = TopicPartition(topic, 0), TopicPartition(topic, 1)
    rounds = [(f"第{n}轮 event {n}".encode(), tp.partition) for n in range(6) for tp in (fresh, committed)]
    await _produce(settings, rounds)
    consumer = _group_consumer(settings)
    await consumer.start()
    try:
        consumer.assign([fresh, committed])
        # The flow is stopped: these are fetched and dropped unread. One partition has a committed
        # offset (2), the other none.
        assert await _fetch(consumer, fresh, 6) == list(range(6))
        await _fetch(consumer, committed, 6)
        await consumer.commit({committed: OffsetAndMetadata(2, "")})
        assert await consumer.position(fresh) == 6

        await _worker_consumer(consumer, changelog=f"{topic}-changelog").seek_to_committed()

        assert await consumer.position(committed) == 2
        assert await consumer.position(fresh) == 0  # aiokafka's seek alone leaves it at 6: records 0..5 lost
        assert await _fetch(consumer, fresh, 6) == list(range(6))
    finally:
        await consumer.stop()


async def test_a_changelog_partition_is_left_to_the_recovery(isolated_settings: Settings) -> None:
    settings = isolated_settings
    await ensure_topics(settings)
    topic = settings.topics.events
    tp = TopicPartition(topic, 0)
    await _produce(settings, [(f"变更 {n}".encode(), 0) for n in range(3)])
    consumer = _group_consumer(settings)
    await consumer.start()
    try:
        consumer.assign([tp])
        await _fetch(consumer, tp, 3)
        await _worker_consumer(consumer, changelog=topic).seek_to_committed()
        assert await consumer.position(tp) == 3
    finally:
        await consumer.stop()
