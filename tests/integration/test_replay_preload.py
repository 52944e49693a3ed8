"""A replay's summary-cache preload against the real broker: the live topic and earlier replays' read together."""

from __future__ import annotations

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from schemas.settings import Settings
from streams.app.cache import SummaryCache
from streams.app.factory import preload_summaries
from streams.app.headers import INPUT_HASH
from streams.app.ledger import preload_cache
from streams.clients.kafka_config import common_kwargs, producer_kwargs
from tests.unit.app.test_ledger_replies import summary

pytestmark = pytest.mark.integration


async def _filled(settings: Settings, topics: dict[str, int]) -> None:
    """Create ``topics`` (2 partitions) holding the given number of summaries each, with their input hashes."""
    admin = AIOKafkaAdminClient(**common_kwargs(settings.kafka))
    await admin.start()
    try:
        await admin.create_topics([NewTopic(t, 2, 1) for t in topics])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(**producer_kwargs(settings.kafka))
    await producer.start()
    try:
        for topic, count in topics.items():
            for n in range(count):
                value = summary(n + 1, 1, f"{topic}-{n}").model_dump_json().encode()
                headers = [(INPUT_HASH, f"{topic}-{n}".encode())]
                await producer.send_and_wait(topic, value, partition=n % 2, headers=headers)
    finally:
        await producer.stop()


async def test_the_live_topic_and_earlier_replays_are_read_together_and_a_missing_topic_is_given_up(
    isolated_settings: Settings,
) -> None:
    live = isolated_settings.topics.summaries
    earlier, own = f"{live}.replay-e1-x", f"{live}.replay-e2-y"
    await _filled(isolated_settings, {live: 5, earlier: 3, own: 4})
    cache = SummaryCache()
    report = await preload_cache(isolated_settings.kafka, [live, earlier, f"{live}.gone"], cache, timeout_s=60)
    assert report.entries == 8 and len(cache) == 8
    assert report.given_up == {f"{live}.gone[*]": "not described (error 3)"}

    cache = SummaryCache()
    report = await preload_summaries(isolated_settings, live, own, cache, timeout_s=60)
    assert report.topics == [live, earlier]  # the live one first, the run's own not at all
    assert report.entries == 8 and not report.given_up
    assert cache.get(f"{earlier}-2") is not None and cache.get(f"{own}-0") is None
