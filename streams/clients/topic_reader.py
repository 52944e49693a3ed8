"""Reading every record of a topic, up to the end it has now (operator commands, not the worker)."""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from schemas.settings import KafkaSettings
from streams.clients.kafka_config import consumer_kwargs


async def read_to_end(kafka: KafkaSettings, topic: str, partitions: int) -> list[Any]:
    """The records (aiokafka's ``ConsumerRecord``) of partitions ``0..partitions-1`` of ``topic``,
    from each partition's first offset to its end at the call, in offset order per partition."""
    # "earliest": the reset that ``assign`` starts on its own must not race the seek to the start
    # (with "latest" it could land last and leave the position at the end: nothing read).
    consumer = AIOKafkaConsumer(**consumer_kwargs(kafka), enable_auto_commit=False, group_id=None,
                                auto_offset_reset="earliest")  # fmt: skip
    await consumer.start()
    out: list[Any] = []
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        starts = await consumer.beginning_offsets(tps)
        for tp in tps:
            consumer.seek(tp, starts.get(tp, 0))
        # Until the last record before each end was read (a position read right after the seek
        # may still be unresolved).
        reached = {tp: starts.get(tp, 0) for tp in tps}
        while any(reached[tp] < ends.get(tp, 0) for tp in tps):
            batch = await consumer.getmany(timeout_ms=1000, max_records=5000)
            for tp, messages in batch.items():
                out.extend(messages)
                if messages:
                    reached[tp] = messages[-1].offset + 1
            if not batch:  # gaps before the end (transaction markers, compaction): the position says
                for tp in tps:
                    if reached[tp] < ends.get(tp, 0) and await consumer.position(tp) >= ends[tp]:
                        reached[tp] = ends[tp]
    finally:
        await consumer.stop()
    return out
