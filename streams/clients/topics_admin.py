"""Creating distill's Kafka topics (``distill init``): idempotent, co-partitioned."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError

from schemas.settings import Settings
from streams.clients.kafka_config import common_kwargs
from streams.errors import ServiceError


@dataclass(frozen=True)
class TopicPlan:
    """A topic ``distill init`` makes sure exists."""

    name: str
    partitions: int
    config: dict[str, str]


def topic_plan(settings: Settings) -> list[TopicPlan]:
    """Events, jobs and summaries share one partition count (they are co-partitioned by session)."""
    t, max_bytes = settings.topics, str(settings.kafka.max_record_bytes + 65536)
    base = {"max.message.bytes": max_bytes}
    return [
        TopicPlan(t.events, t.partitions, {**base, "retention.ms": "-1"}),
        TopicPlan(t.jobs, t.partitions, {**base, "retention.ms": str(7 * 24 * 3600 * 1000)}),
        TopicPlan(t.summaries, t.partitions, {**base, "retention.ms": "-1"}),
        TopicPlan(t.dead_letters, t.partitions, {**base, "retention.ms": "-1"}),
    ]


async def ensure_topics(settings: Settings) -> dict[str, str]:
    """Create missing topics; returns ``{topic: "created" | "exists"}``.

    Raises ``ServiceError`` when an existing topic has a different partition
    count than a co-partitioned sibling needs.
    """
    admin = AIOKafkaAdminClient(**common_kwargs(settings.kafka))
    try:
        await admin.start()
        existing = set(await admin.list_topics())
        plan = topic_plan(settings)
        missing = [p for p in plan if p.name not in existing]
        if missing:
            await admin.create_topics(
                [NewTopic(p.name, p.partitions, settings.topics.replication_factor, topic_configs=p.config)
                 for p in missing]
            )  # fmt: skip
        await _check_partitions(admin, plan)
        return {p.name: ("created" if p in missing else "exists") for p in plan}
    except KafkaError as exc:
        raise ServiceError(f"kafka at {settings.kafka.bootstrap_servers}: {exc}") from exc
    finally:
        await admin.close()


async def _partition_counts(admin: AIOKafkaAdminClient, names: list[str]) -> dict[str, int]:
    # Right after creation the broker may describe a topic with no partitions yet: ask again (for up
    # to 30 s: a busy 2-core box has been seen to take more than 5 s).
    for _ in range(300):
        described = await admin.describe_topics(names)
        counts = {d["topic"]: len(d["partitions"]) for d in described}
        if all(counts.get(n, 0) > 0 for n in names):
            break
        await asyncio.sleep(0.1)
    return counts


async def _check_partitions(admin: AIOKafkaAdminClient, plan: list[TopicPlan]) -> None:
    counts = await _partition_counts(admin, [p.name for p in plan])
    for p in plan:
        if counts.get(p.name, p.partitions) != p.partitions:
            raise ServiceError(
                f"topic {p.name} has {counts[p.name]} partitions but distill expects {p.partitions} "
                "(co-partitioned topics must match; set DISTILL_TOPICS__PARTITIONS accordingly)"
            )
