"""Projector writes: idempotent re-delivery, deletion, dead letters, tenant isolation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from schemas import SessionKey
from schemas.headers import EVENTS_OFFSET
from tests.integration.test_projections_support import (
    EVENTS,
    SUMMARIES,
    Store,
    event,
    key,
    record,
    store,
    summary,
)

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="session")]
__all__ = ["key", "store"]


def _count(store: Store, table: str) -> int:
    return int(store.session.execute(f"SELECT count(*) FROM {store.settings.cassandra.keyspace}.{table}").one()[0])


async def test_redelivery_leaves_one_row(store: Store, key: SessionKey) -> None:
    call = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    batch = [
        record(EVENTS, event(key, "e1", at=1, content="first message"), offset=10),
        record(EVENTS, event(key, "e2", at=2, role="assistant", content=None, tool_calls=call), offset=11),
        record(EVENTS, event(key, "e3", at=3, role="tool", content="result", tool_call_id="c1"), offset=12),
        record(SUMMARIES, summary(key, 1, text="s", cutoff=3, last_event_id="e3"), offset=5),
    ]
    await store.apply(*batch)
    tables = ("events_by_session", "event_ids", "tool_calls", "recall_docs", "summaries_latest", "summaries_history")
    before = {t: _count(store, t) for t in tables}
    assert before == {"events_by_session": 3, "event_ids": 3, "tool_calls": 1, "recall_docs": 2,
                      "summaries_latest": 1, "summaries_history": 1}  # fmt: skip
    await store.apply(*batch)
    await store.apply(*reversed(batch))
    assert {t: _count(store, t) for t in tables} == before
    offsets = await store.projector.load_offsets()
    assert offsets == {(EVENTS, 0): 13, (SUMMARIES, 0): 6}


async def test_delete_session_removes_rows_and_blocks_late_summaries(store: Store, key: SessionKey) -> None:
    other = SessionKey(key.app_name, key.user_id, "keep")
    old = datetime.now(UTC) - timedelta(minutes=5)
    await store.events(event(key, "e1", at=1, content="secret alpha"), event(other, "k1", at=1, content="alpha kept"))
    await store.summaries(summary(key, 1, text="s", cutoff=1, last_event_id="e1", created=old))
    delete = {"type": "delete_session", "command_id": "d1", "app_name": key.app_name, "user_id": key.user_id,
              "session_id": key.session_id}  # fmt: skip
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    deletion = record(EVENTS, delete, timestamp_ms=now_ms)
    outcome = await store.apply(deletion)
    assert outcome.deletes == 1
    assert await store.reader.get_summary_text(key) is None
    assert await store.reader.events_after_boundary(key) == []
    assert await store.reader.session_search(key, "alpha", "current_session") == []
    assert [h.event_id for h in await store.reader.session_search(other, "alpha", "current_session")] == ["k1"]
    # A summary produced before the deletion, arriving late, does not resurrect the session.
    await store.summaries(summary(key, 2, text="late", cutoff=1, last_event_id="e1", created=old))
    assert await store.reader.get_summary_text(key) is None
    # Nor does one made after it by a job that was in flight at the deletion: its boundary event
    # comes before the command in the events topic (the worker's header says where).
    before = (EVENTS_OFFSET, str(deletion.offset - 1).encode())
    in_flight = summary(key, 3, text="在途的旧摘要", cutoff=1, last_event_id="e1")
    await store.apply(record(SUMMARIES, in_flight, headers=(before,)))
    assert await store.reader.get_summary_text(key) is None
    # The session may start again after the deletion.
    await store.events(event(key, "n1", at=50, content="new life"))
    await store.summaries(summary(key, 1, text="fresh", cutoff=50, last_event_id="n1"))
    assert await store.reader.get_summary_text(key) == "fresh"
    # Events stamped long ago (an imported session) do not make its new summaries stale: the log decides.
    after = (EVENTS_OFFSET, str(deletion.offset + 1).encode())
    await store.apply(
        record(SUMMARIES, summary(key, 2, text="又一版", cutoff=50, last_event_id="n1"), headers=(after,))
    )
    assert await store.reader.get_summary_text(key) == "又一版"


async def test_delete_is_a_barrier_inside_a_batch(store: Store, key: SessionKey) -> None:
    delete = {"type": "delete_session", "command_id": "d1", "app_name": key.app_name, "user_id": key.user_id,
              "session_id": key.session_id}  # fmt: skip
    await store.apply(
        record(EVENTS, event(key, "before", at=1)),
        record(EVENTS, delete, timestamp_ms=1),
        record(EVENTS, event(key, "after", at=2)),
    )
    assert [e.event_id for e in await store.reader.events_after_boundary(key)] == ["after"]


async def test_malformed_records_go_to_dead_letters(store: Store, key: SessionKey) -> None:
    bad_event = event(key, "e1", at=1)
    del bad_event["author"]
    outcome = await store.apply(
        record(EVENTS, b"{not json"),
        record(EVENTS, bad_event),
        record(SUMMARIES, {"type": "mystery"}),
        record(SUMMARIES, {"type": "summary_failure"}),
        record(EVENTS, event(key, "ok", at=2)),
        record(EVENTS, {"type": "summarize", "command_id": "c", "app_name": "a", "user_id": "u", "session_id": "s"}),
    )
    assert [d.error_class for d in store.dead] == ["RecordDecodeError", "ValidationError", "RecordDecodeError"]
    assert "author" in store.dead[1].reason
    assert outcome.events == 1 and outcome.ignored == 2


async def test_recall_docs_compaction_is_tiered_by_eight(store: Store) -> None:
    # Each compaction rebuilds the SAI token index of the rows it rewrites: recall_docs is
    # compacted with a fan-in of 8 (projections/cql/003_recall_compaction.cql).
    row = store.session.execute(
        "SELECT compaction FROM system_schema.tables WHERE keyspace_name = %s AND table_name = 'recall_docs'",
        (store.settings.cassandra.keyspace,),
    ).one()
    assert row.compaction["class"].endswith("UnifiedCompactionStrategy")
    assert row.compaction["scaling_parameters"] == "T8"
