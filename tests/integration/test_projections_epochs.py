"""Summary epochs in Cassandra: a switch replaces a session's served summaries at once, and stays put.

One keyspace for the module (its migrations are the expensive part), one
session per test. The records are the projector's input as the summaries
topic orders them (explicit offsets).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
import pytest_asyncio

from projections.context_read import ContextReader
from projections.epoch_reads import EpochReader
from schemas import SessionKey
from schemas.settings import Settings
from tests.integration.test_projections_support import (
    EVENTS,
    SUMMARIES,
    Store,
    close_store,
    event,
    open_store,
    record,
    summary,
)
from tests.support.keyspaces import KeyspacePool

pytestmark = pytest.mark.integration
REPLAY = f"{SUMMARIES}.replay-e1-20260101000000-abcd"


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def store(service_settings: Settings, keyspaces: KeyspacePool) -> AsyncIterator[Store]:
    data = service_settings.model_dump()
    data["cassandra"]["keyspace"] = keyspaces.lease()
    s = open_store(Settings(**data))
    try:
        yield s
    finally:
        close_store(s)
        keyspaces.release(data["cassandra"]["keyspace"])


def key() -> SessionKey:
    return SessionKey("app", "u1", f"s-{uuid.uuid4().hex[:8]}")


def of_epoch(value: dict[str, Any], epoch: int) -> dict[str, Any]:
    return {**value, "epoch": epoch}


def switch(k: SessionKey, epoch: int, heads: list[dict[str, Any]], *, previous: int = 0, cid: str = "c1"
           ) -> dict[str, Any]:  # fmt: skip
    return {
        "type": "epoch_adopted", "app_name": k.app_name, "user_id": k.user_id, "session_id": k.session_id,
        "epoch": epoch, "previous_epoch": previous, "heads": [{"summary": h, "events_offset": None} for h in heads],
        "replaced": [], "command_id": cid, "created_at": datetime.now(UTC).isoformat(),
    }  # fmt: skip


async def served(store: Store, k: SessionKey) -> dict[str, tuple[int, int, str]]:
    return {s.filter_key: (s.epoch, s.version, s.summary) for s in await store.reader.list_summaries(k)}


async def test_a_switch_replaces_every_key_at_once_and_records_before_it_no_longer_move_it(store: Store) -> None:
    k = key()
    await store.events(event(k, "e1", at=1), event(k, "e2", at=2), event(k, "e3", at=3, filter_key="app/b"))
    live = [summary(k, 1, text="旧摘要一", cutoff=1, last_event_id="e1"),
            summary(k, 2, text="旧摘要二", cutoff=2, last_event_id="e2"),
            summary(k, 1, text="旧分支", cutoff=3, last_event_id="e3", filter_key="app/b")]  # fmt: skip
    await store.apply(*(record(SUMMARIES, v, offset=10 + i) for i, v in enumerate(live)))
    assert await served(store, k) == {"": (0, 2, "旧摘要二"), "app/b": (0, 1, "旧分支")}
    # the replay's versions: history only, until a switch
    replayed = [of_epoch(summary(k, 1, text="新摘要一", cutoff=2, last_event_id="e2"), 1)]
    out = await store.apply(record(REPLAY, replayed[0], offset=0))
    assert out.epoch_summaries == 1 and (await served(store, k))[""] == (0, 2, "旧摘要二")
    out = await store.apply(record(SUMMARIES, switch(k, 1, replayed), offset=20))
    assert out.adoptions == 1
    # one epoch: the key the epoch has no summary for is gone, not left from the old line
    assert await served(store, k) == {"": (1, 1, "新摘要一")}
    reads = ContextReader(store.session, store.settings.cassandra.keyspace)
    read = await reads.read(k)
    assert read.summary is not None and (read.summary.epoch, read.summary.summary) == (1, "新摘要一")
    assert read.served_epoch == 1
    # delivered again from an earlier offset: the old line's summaries and the switch itself change nothing
    out = await store.apply(*(record(SUMMARIES, v, offset=10 + i) for i, v in enumerate(live)),
                            record(SUMMARIES, switch(k, 1, replayed), offset=20))  # fmt: skip
    assert out.adoptions == 0 and await served(store, k) == {"": (1, 1, "新摘要一")}
    # the adopted line goes on
    nxt = of_epoch(summary(k, 2, text="新摘要二", cutoff=3, last_event_id="e3"), 1)
    await store.apply(record(SUMMARIES, nxt, offset=21))
    assert await served(store, k) == {"": (1, 2, "新摘要二")}
    history = await store.reader.summary_history(k, "")
    assert [(h.epoch, h.version) for h in history] == [(1, 2), (1, 1), (0, 2), (0, 1)]
    # a switch to an epoch without a head of the session: no summary, and the read still names the epoch
    await store.apply(record(SUMMARIES, switch(k, 2, [], previous=1, cid="c-empty"), offset=22))
    empty = await reads.read(k)
    assert (await served(store, k), empty.summary, empty.served_epoch) == ({}, None, 2)
    view = await store.reader.get_summary_view(k, "app/b")
    text = await store.reader.get_summary_text(k, "")
    assert (view, text, await store.reader.get_summary(k)) == (None, None, None)


async def test_switching_back_serves_the_old_line_and_every_epoch_stays_listed(store: Store) -> None:
    k = key()
    await store.events(event(k, "e1", at=1), event(k, "e2", at=2))
    old = summary(k, 1, text="live one", cutoff=1, last_event_id="e1")
    new = of_epoch(summary(k, 1, text="epoch one", cutoff=1, last_event_id="e1"), 1)
    await store.apply(record(SUMMARIES, old, offset=5), record(REPLAY, new, offset=0),
                      record(SUMMARIES, switch(k, 1, [new]), offset=6))  # fmt: skip
    assert await served(store, k) == {"": (1, 1, "epoch one")}
    await store.apply(record(SUMMARIES, switch(k, 0, [old], previous=1, cid="c2"), offset=7))
    assert await served(store, k) == {"": (0, 1, "live one")}
    later = summary(k, 2, text="live two", cutoff=2, last_event_id="e2")
    await store.apply(record(SUMMARIES, later, offset=8))
    assert await served(store, k) == {"": (0, 2, "live two")}
    epochs = await EpochReader(store.session, store.settings.cassandra.keyspace, store.reader).epochs(k)
    assert [(e.epoch, e.served, e.versions, [h.summary for h in e.heads]) for e in epochs] == [
        (0, True, 2, ["live two"]), (1, False, 1, ["epoch one"])]  # fmt: skip
    adoptions = await EpochReader(store.session, store.settings.cassandra.keyspace).adoptions(k)
    assert [(a.record_offset, a.epoch, a.previous_epoch) for a in adoptions] == [(7, 0, 1), (6, 1, 0)]


async def test_a_deleted_session_is_not_brought_back_by_a_late_switch(store: Store) -> None:
    k = key()
    await store.events(event(k, "e1", at=1))
    new = of_epoch(summary(k, 1, text="epoch one", cutoff=1, last_event_id="e1"), 1)
    late = switch(k, 1, [new])
    delete = {"type": "delete_session", "app_name": k.app_name, "user_id": k.user_id, "session_id": k.session_id,
              "command_id": "d1"}  # fmt: skip
    await store.apply(record(EVENTS, delete, timestamp_ms=int(datetime.now(UTC).timestamp() * 1000) + 60_000))
    await store.apply(record(SUMMARIES, late, offset=3))
    assert await served(store, k) == {}


async def test_a_summary_of_the_adopted_epoch_from_before_the_switch_does_not_move_it(store: Store) -> None:
    # The session was served from epoch 1 once (v1, v2 at offsets 3, 4), left it, and is switched back
    # to it at offset 9 with the heads the switch names: what came before the switch is history only.
    k = key()
    await store.events(event(k, "e1", at=1), event(k, "e2", at=2))
    head = of_epoch(summary(k, 1, text="the head the switch names", cutoff=1, last_event_id="e1"), 1)
    before = of_epoch(summary(k, 2, text="epoch 1, before the switch", cutoff=2, last_event_id="e2"), 1)
    await store.apply(record(SUMMARIES, switch(k, 1, [head]), offset=9))
    await store.apply(record(SUMMARIES, before, offset=4))
    assert await served(store, k) == {"": (1, 1, "the head the switch names")}
