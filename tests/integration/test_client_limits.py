"""The client and the record limit, on the real Kafka: a record over ``max_record_bytes`` is refused
before anything is sent, counted in UTF-8 bytes (CJK text is three bytes a character)."""

from __future__ import annotations

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from schemas import SessionEvent
from schemas.settings import Settings
from streams.app.decoding import decode_event_record
from streams.client import DistillClient, encode_record
from streams.clients.kafka_config import consumer_kwargs
from streams.clients.topics_admin import ensure_topics
from streams.errors import RecordTooLargeError
from tests.integration.pipeline_support import SessionBuilder, read_topic

pytestmark = pytest.mark.integration

LIMIT = 200_000


@pytest.fixture()
async def limited(isolated_settings: Settings) -> Settings:
    data = isolated_settings.model_dump()
    data["kafka"]["max_record_bytes"] = LIMIT
    settings = Settings(**data)
    await ensure_topics(settings)  # the topics take LIMIT + 64 KiB, as `distill init` makes them
    return settings


async def logged(settings: Settings) -> int:
    """How many records the events topic holds."""
    consumer = AIOKafkaConsumer(**consumer_kwargs(settings.kafka), group_id=None, enable_auto_commit=False)
    await consumer.start()
    try:
        parts = consumer.partitions_for_topic(settings.topics.events) or set()
        if not parts:
            await consumer._client.force_metadata_update()
            parts = consumer.partitions_for_topic(settings.topics.events) or set()
        tps = [TopicPartition(settings.topics.events, p) for p in parts]
        assert tps
        return sum((await consumer.end_offsets(tps)).values())
    finally:
        await consumer.stop()


def sized(b: SessionBuilder, size: int, marker: str) -> SessionEvent:
    """A tool result of CJK text whose record is exactly ``size`` bytes (ASCII padding for the rest)."""
    base = b.event("tool", marker, message={"tool_call_id": "c1"})
    cjk = "长" * ((size - len(encode_record(base))) // 3)
    pad = "x" * (size - len(encode_record(base)) - 3 * len(cjk))
    event = base.model_copy(update={"message": base.message.model_copy(update={"content": marker + cjk + pad})})
    assert len(encode_record(event)) == size and len(event.message.content or "") < size // 2
    return event


async def test_a_batch_with_a_record_over_the_limit_sends_nothing(limited: Settings) -> None:
    b = SessionBuilder(app="lim")
    before = b.user("第一个 MK-1")
    huge = sized(b, LIMIT + 30_000, "MK-2")  # over the limit, under what the broker takes
    after = b.assistant("第三个 MK-3")
    larger = sized(b, LIMIT + 100_000, "MK-4")  # over what the producer and the broker take
    async with DistillClient(limited) as client:
        with pytest.raises(RecordTooLargeError) as refused:
            await client.publish_logged([before, huge, after])
        with pytest.raises(RecordTooLargeError):
            await client.publish(huge)
        with pytest.raises(RecordTooLargeError):
            await client.publish_logged([before, after, larger])
    assert huge.event_id in str(refused.value) and f"{LIMIT + 30_000} bytes" in str(refused.value)
    assert "MK-2" not in str(refused.value)  # the error names the record, never its content
    # Nothing was sent: the events before the refused one are not on the log while the caller is told
    # the batch failed (a retry would send them twice), and the refused one is no dead letter of the worker.
    assert await logged(limited) == 0


async def test_a_record_at_the_limit_is_sent_and_accepted_by_the_worker(limited: Settings) -> None:
    b = SessionBuilder(app="lim")
    first = b.user("你好 MK-0")
    at = sized(b, LIMIT, "MK-at")
    async with DistillClient(limited) as client:
        await client.publish_logged([first, at])
    records = await read_topic(limited, limited.topics.events, min_records=2)
    decoded = [decode_event_record(r.value, LIMIT) for r in records]
    assert [d.event_id for d in decoded if isinstance(d, SessionEvent)] == [first.event_id, at.event_id]
