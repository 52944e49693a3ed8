"""Builders and fixtures shared by the projections integration tests (no tests of its own)."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import pytest_asyncio
from cassandra.cluster import Cluster, Session

from projections.cassandra_session import connect
from projections.indexer import RecallIndexer
from projections.migrations import apply_migrations
from projections.projector import Projector, SourceRecord
from projections.read_api import SessionReader
from schemas import DeadLetter, SessionKey
from schemas.settings import Settings

T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
EVENTS = "events"
SUMMARIES = "summaries"
_offsets = itertools.count(1)


def event(key: SessionKey, event_id: str, *, at: float, role: str = "user", content: str | None = "hello",
          filter_key: str = "", tool_calls: list[dict[str, Any]] | None = None, tool_call_id: str | None = None,
          name: str | None = None, partial: bool = False) -> dict[str, Any]:  # fmt: skip
    message: dict[str, Any] = {"role": role, "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    if tool_call_id:
        message["tool_call_id"] = tool_call_id
    if name:
        message["name"] = name
    return {
        "type": "event", "app_name": key.app_name, "user_id": key.user_id, "session_id": key.session_id,
        "event_id": event_id, "timestamp": (T0 + timedelta(seconds=at)).isoformat(), "author": "user" if role == "user"
        else "agent", "filter_key": filter_key, "message": message, "partial": partial,
    }  # fmt: skip


def summary(key: SessionKey, version: int, *, text: str, cutoff: float, last_event_id: str | None,
            filter_key: str = "", prev: tuple[float, str | None] | None = None,
            created: datetime | None = None) -> dict[str, Any]:  # fmt: skip
    return {
        "type": "summary", "app_name": key.app_name, "user_id": key.user_id, "session_id": key.session_id,
        "filter_key": filter_key, "summary": text, "version": version,
        "previous_version": version - 1 if version > 1 else None,
        "boundary": {"cutoff_at": (T0 + timedelta(seconds=cutoff)).isoformat(), "last_event_id": last_event_id},
        "previous_boundary": None if prev is None else {
            "cutoff_at": (T0 + timedelta(seconds=prev[0])).isoformat(), "last_event_id": prev[1]},
        "model": "m", "prompt_version": "p1", "created_at": (created or datetime.now(UTC)).isoformat(),
        "report": {"trigger": {"name": "manual"}}, "job_id": f"job-{version}",
    }  # fmt: skip


def record(topic: str, value: dict[str, Any] | bytes, *, partition: int = 0, offset: int | None = None,
           timestamp_ms: int = 0, headers: tuple[tuple[str, bytes], ...] = ()) -> SourceRecord:  # fmt: skip
    import json

    raw = value if isinstance(value, bytes) else json.dumps(value).encode()
    offset = next(_offsets) if offset is None else offset
    return SourceRecord(topic, partition, offset, b"k", raw, timestamp_ms, headers)


@dataclass
class Store:
    settings: Settings
    cluster: Cluster
    session: Session
    projector: Projector
    reader: SessionReader
    dead: list[DeadLetter]
    indexer: RecallIndexer

    async def apply(self, *records: SourceRecord) -> Any:
        """The projector's outcome of ``records``, after the indexer has indexed them too (what
        ``distill projector`` does with its two consumers, here in one step)."""

        async def sink(letter: DeadLetter) -> None:
            self.dead.append(letter)

        outcome = await self.projector.project(list(records), sink)
        await self.indexer.project([r for r in records if r.topic == EVENTS], sink)
        return outcome

    async def events(self, *values: dict[str, Any]) -> Any:
        return await self.apply(*(record(EVENTS, v) for v in values))

    async def summaries(self, *values: dict[str, Any]) -> Any:
        return await self.apply(*(record(SUMMARIES, v) for v in values))


def open_store(settings: Settings, embedder: Any = None) -> Store:
    cluster, session = connect(settings.cassandra)
    apply_migrations(session, settings.cassandra)
    ks = settings.cassandra.keyspace
    projector = Projector(session, ks, events_topic=EVENTS, summaries_topic=SUMMARIES, consumer_group="g")
    indexer = RecallIndexer(session, ks, events_topic=EVENTS, consumer_group="g-index", embedder=embedder)
    return Store(settings, cluster, session, projector, SessionReader(session, ks, embedder=embedder), [], indexer)


def close_store(store: Store) -> None:
    """Disconnect; the keyspace is the ``pooled_settings`` fixture's (emptied after the test)."""
    store.cluster.shutdown()


@contextmanager
def leased_store(service_settings: Settings, keyspaces: Any) -> Iterator[Store]:
    """A store on a keyspace leased from the pool for as long as it is open (a module's, typically)."""
    name = keyspaces.lease()
    data = service_settings.model_dump()
    data["cassandra"]["keyspace"] = name
    s = open_store(Settings(**data))
    try:
        yield s
    finally:
        close_store(s)
        keyspaces.release(name)


@pytest_asyncio.fixture(loop_scope="session")
async def store(pooled_settings: Settings) -> AsyncIterator[Store]:
    s = open_store(pooled_settings)
    try:
        yield s
    finally:
        close_store(s)


@pytest.fixture()
def key() -> Iterator[SessionKey]:
    yield SessionKey("app", "u1", "s1")
