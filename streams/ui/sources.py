"""Where the pages' data comes from: the read API, the catalog, the recall executor, Kafka (I/O lives here).

Nothing here decides what a page shows; the routes hand these values to
``streams.ui.views``. Recall goes through ``RecallExecutor.execute`` (the
agent tools' own entry point), redrive through ``streams.rules.dead_letters`` and
the publisher of ``distill dead-letters redrive``.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cassandra.cluster import Cluster, NoHostAvailable, Session

from projections.boundary import Cut
from projections.cassandra_session import connect
from projections.catalog import SessionCatalog
from projections.read_api import SessionReader, StoredEvent, StoredSummary
from schemas import SessionKey
from schemas.commands import DeleteSession
from schemas.dead_letter import DeadLetter
from schemas.events import FunctionCall, ToolCall
from schemas.settings import Settings
from streams.app.tracked import TrackedKey
from streams.clients.recall_reader import CassandraRecallReader
from streams.context.recall_tools import SESSION_LOAD, SESSION_SEARCH, RecallExecutor
from streams.errors import ServiceError
from streams.rules.dead_letters import RedrivePlan, Selection, SourceCoordinates, plan_redrive
from streams.ui.views import KeyBoundary

CHANGELOG_SCAN_LIMIT = 200_000
"""At most this many changelog records are read for the jobs in flight (the page says when it stopped)."""


TRIGGER_TABLE = "track-state"
"""``streams.app.factory.TABLE_NAME``, restated so the UI does not import Faust (a unit test keeps them equal)."""


def changelog_topic(settings: Settings) -> str:
    """The worker's trigger-state changelog (as ``streams.app.factory`` names it)."""
    return f"{settings.worker.app_id}-{TRIGGER_TABLE}-changelog"


@dataclass
class Sources:
    """The connections one ``distill ui`` process shares between requests."""

    settings: Settings
    cluster: Cluster
    session: Session
    reader: SessionReader
    catalog: SessionCatalog

    @classmethod
    def open(cls, settings: Settings) -> Sources:
        """Connect to Cassandra and prepare the read statements (blocking: run it in a thread)."""
        c = settings.cassandra
        try:
            cluster, session = connect(c)
        except NoHostAvailable as exc:
            raise ServiceError(f"cassandra at {c.contact_points}:{c.port} is not reachable") from exc
        try:
            reader = SessionReader(session, c.keyspace)
        except Exception as exc:
            cluster.shutdown()
            raise ServiceError(
                f"the read side of keyspace {c.keyspace!r} is not usable ({exc}); run 'distill init'"
            ) from exc
        return cls(settings, cluster, session, reader, SessionCatalog(session, c.keyspace, reader))

    def close(self) -> None:
        self.cluster.shutdown()

    # -- sessions ------------------------------------------------------------------------------------------

    async def boundaries(self, key: SessionKey) -> list[KeyBoundary]:
        """The latest summary of every key, its boundary resolved to stored positions."""
        summaries = await self.reader.list_summaries(key)
        cuts = await asyncio.gather(*(self.reader.resolve_cut(key, s.cutoff_at, s.last_event_id) for s in summaries))
        return [
            KeyBoundary(s.filter_key, s.version, cut, s.last_event_id, s.cutoff_at, s.summary)
            for s, cut in zip(summaries, cuts, strict=True)
        ]

    async def events(self, key: SessionKey) -> list[StoredEvent]:
        """Every stored event of the session, partial ones included (the timeline shows what the session holds)."""
        return await self.reader.stored_events(key)

    async def after_boundary(self, key: SessionKey, filter_key: str, summary: StoredSummary) -> list[StoredEvent]:
        """What the next prompt of ``filter_key`` carries after ``summary`` (the read API's own rule)."""
        return await self.reader.events_after_boundary(key, filter_key, summary=summary)

    async def history(self, key: SessionKey, filter_key: str) -> list[StoredSummary]:
        """The versions of the epoch the session is served from (the versions of one epoch count 1, 2, ...)."""
        latest = await self.reader.latest_summary(key, filter_key)
        return await self.reader.summary_history(key, filter_key, epoch=latest.epoch if latest is not None else 0)

    async def cut_of(self, key: SessionKey, boundary: Any) -> Cut | None:
        if boundary is None:
            return None
        return await self.reader.resolve_cut(key, boundary.cutoff_at, boundary.last_event_id)

    async def recall(self, key: SessionKey, filter_key: str, tool: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Run ``session_search`` / ``session_load`` as the agent would, and return the tool's JSON answer."""
        executor = RecallExecutor(
            CassandraRecallReader(self.reader), app_name=key.app_name, user_id=key.user_id,
            session_id=key.session_id, filter_key=filter_key,
        )  # fmt: skip
        if tool not in (SESSION_SEARCH, SESSION_LOAD):
            raise ValueError(f"unknown recall tool {tool!r}")
        call = ToolCall(
            id=f"ui-{uuid.uuid4().hex[:12]}", function=FunctionCall(name=tool, arguments=json.dumps(dict(arguments)))
        )
        message = await executor.execute(call)
        body: dict[str, Any] = json.loads(str(message.content))
        return body

    # -- Kafka ---------------------------------------------------------------------------------------------

    async def dead_letters(self) -> tuple[list[DeadLetter], int]:
        """Every dead letter on the topic and the count of records that are not valid dead letters."""
        from streams.cli.dead_letters_cmd import stored_batches

        letters: list[DeadLetter] = []
        invalid = 0
        async for batch in stored_batches(self.settings, follow=False):
            invalid += sum(1 for r in batch if r.letter is None)
            letters.extend(r.letter for r in batch if r.letter is not None)
        return letters, invalid

    async def redrive(self, coordinates: SourceCoordinates) -> tuple[RedrivePlan, list[tuple[str, int, int]]]:
        """Redrive the dead letter of one source record, exactly as ``distill dead-letters redrive --offset``."""
        from streams.cli.dead_letters_cmd import publish_redrives

        letters, _ = await self.dead_letters()
        chosen = Selection(offsets=frozenset({coordinates})).apply(letters)
        allowed = (self.settings.topics.events, self.settings.topics.summaries)
        plan = plan_redrive(chosen, allowed)
        if plan.foreign or not plan.publish:
            return plan, []
        return plan, await publish_redrives(self.settings, plan.publish)

    async def delete_session(self, key: SessionKey) -> tuple[int, int]:
        """Publish a ``delete_session`` command for ``key`` (the worker and the projector remove it)."""
        from streams.client import DistillClient

        command = DeleteSession(
            app_name=key.app_name, user_id=key.user_id, session_id=key.session_id,
            command_id=f"ui-delete-{uuid.uuid4().hex[:12]}",
        )  # fmt: skip
        async with DistillClient(self.settings) as client:
            return await client.publish(command)

    async def kafka_offsets(self) -> tuple[dict[str, dict[tuple[str, int], int | None]], dict[tuple[str, int], int]]:
        """Committed offsets of every consumer group on distill's topics, and the end offset of their partitions."""
        from aiokafka import AIOKafkaConsumer, TopicPartition
        from aiokafka.admin import AIOKafkaAdminClient

        from streams.clients.kafka_config import common_kwargs, consumer_kwargs

        t = self.settings.topics
        ours = {t.events, t.jobs, t.summaries, t.dead_letters, changelog_topic(self.settings)}
        admin = AIOKafkaAdminClient(**common_kwargs(self.settings.kafka))
        consumer = AIOKafkaConsumer(**consumer_kwargs(self.settings.kafka), group_id=None, enable_auto_commit=False)
        await admin.start()
        await consumer.start()
        try:
            groups = sorted(g[0] if isinstance(g, tuple) else g for g in await admin.list_consumer_groups())
            answers = await asyncio.gather(*(admin.list_consumer_group_offsets(g) for g in groups))
            committed: dict[str, dict[tuple[str, int], int | None]] = {}
            for group, offsets in zip(groups, answers, strict=True):
                mine = {(tp.topic, tp.partition): (meta.offset if meta is not None else None)
                        for tp, meta in offsets.items() if tp.topic in ours}  # fmt: skip
                if mine:
                    committed[group] = mine
            await consumer._client.force_metadata_update()  # an unsubscribed consumer has no metadata yet
            tps: list[TopicPartition] = []
            for topic in sorted(ours):
                tps.extend(TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ()))
            ends = await consumer.end_offsets(tps) if tps else {}
            return committed, {(tp.topic, tp.partition): off for tp, off in ends.items()}
        finally:
            await consumer.stop()
            await admin.close()

    async def trigger_states(self) -> tuple[list[TrackedKey], int, bool]:
        """The worker's table values from its changelog (last value per key), unreadable ones, and truncation."""
        from aiokafka import AIOKafkaConsumer, TopicPartition

        from streams.clients.kafka_config import consumer_kwargs
        from streams.ui.views import decode_tracked, latest_per_key

        topic = changelog_topic(self.settings)
        consumer = AIOKafkaConsumer(**consumer_kwargs(self.settings.kafka), group_id=None, enable_auto_commit=False)
        await consumer.start()
        try:
            await consumer._client.force_metadata_update()
            tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
            if not tps:
                return [], 0, False
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            ends = await consumer.end_offsets(tps)
            records: list[tuple[bytes | None, bytes | None]] = []
            truncated = False
            deadline = time.monotonic() + 20.0
            while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
                batch = await consumer.getmany(*tps, timeout_ms=500)
                records.extend((m.key, m.value) for msgs in batch.values() for m in msgs)
                if len(records) >= CHANGELOG_SCAN_LIMIT or time.monotonic() > deadline:
                    truncated = True
                    break
        finally:
            await consumer.stop()
        tracked, bad = decode_tracked(latest_per_key(records).values())
        return tracked, bad, truncated

    def jobs_gauge(self) -> float | None:
        """``distill_jobs_in_flight`` from the worker's metrics endpoint, when ``worker.metrics_port`` is set."""
        port = self.settings.worker.metrics_port
        if not port:
            return None
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
                text = response.read().decode()
        except OSError:
            return None
        for line in text.splitlines():
            if line.startswith("distill_jobs_in_flight "):
                return float(line.split()[1])
        return None


def now() -> datetime:
    return datetime.now(UTC)
