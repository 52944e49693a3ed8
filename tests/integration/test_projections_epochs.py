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
from schemas.headers import EVENTS_OFFSET
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
from tests.support.markers import MarkerBook

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


# -- A deletion and the epoch a session is served from ---------------------------------------------------------
# The worker keeps serving a session from the epoch it switched to across a ``delete_session`` (its head
# book and trigger state keep the epoch; only the events before the deletion stop counting), and it decides
# a switch without looking at deletions: the heads an ``epoch_adopted`` record carries may be summaries of
# the history a deletion removed (a replay's heads, or the heads a session left on epoch 0). The projector
# reads the events and summaries topics side by side, so a switch may reach it before or after the
# deletion whatever their order in the worker. Oracle: one marker per event; after the deletion no served
# summary and no listed epoch holds a deleted marker, and every marker of the events after it is in the
# served summary or in the read.


def marked(k: SessionKey, book: MarkerBook, event_id: str, at: float) -> dict[str, Any]:
    return event(k, event_id, at=at, content=f"第{event_id}条{book.mint(f'{k.session_id}/{event_id}')}：记住它")


def marks(book: MarkerBook, k: SessionKey, *ids: str) -> list[str]:
    return [m for i in ids for m in book.markers_of(f"{k.session_id}/{i}")]


def echo(book: MarkerBook, k: SessionKey, *ids: str) -> str:
    """What the scripted model answers for a pass over ``ids``: their markers."""
    return "摘要：" + " ".join(marks(book, k, *ids))


def summary_record(topic: str, value: dict[str, Any], *, offset: int, events_offset: int) -> Any:
    return record(topic, value, offset=offset, headers=((EVENTS_OFFSET, str(events_offset).encode()),))


def switch_at(k: SessionKey, epoch: int, heads: list[tuple[dict[str, Any], int]], *, previous: int, cid: str,
              replaced: list[tuple[dict[str, Any], int]] | None = None) -> dict[str, Any]:  # fmt: skip
    return {**switch(k, epoch, [], previous=previous, cid=cid),
            "heads": [{"summary": h, "events_offset": o} for h, o in heads],
            "replaced": [{"summary": h, "events_offset": o} for h, o in replaced or ()]}  # fmt: skip


def deletion(k: SessionKey, offset: int, at_ms: int) -> Any:
    value = {"type": "delete_session", "app_name": k.app_name, "user_id": k.user_id, "session_id": k.session_id,
             "command_id": f"d-{offset}"}  # fmt: skip
    return record(EVENTS, value, offset=offset, timestamp_ms=at_ms)


def now_ms() -> int:
    return int(datetime.now(UTC).timestamp() * 1000)


async def leaked(store: Store, k: SessionKey, deleted: list[str]) -> list[str]:
    """The deleted markers still shown: in the served summaries, the epochs listed, the read."""
    texts = [s.summary for s in await store.reader.list_summaries(k)]
    epochs = await EpochReader(store.session, store.settings.cassandra.keyspace, store.reader).epochs(k)
    texts += [h.summary for e in epochs for h in e.heads]
    read = await ContextReader(store.session, store.settings.cassandra.keyspace).read(k)
    texts += [read.summary.summary] if read.summary is not None else []
    texts += [e.message.content or "" for e in read.events]
    return [m for m in deleted if any(m in t for t in texts)]


async def unaccounted(store: Store, k: SessionKey, kept: list[str]) -> list[str]:
    """The markers of ``kept`` neither in the served summary nor among the read's events."""
    read = await ContextReader(store.session, store.settings.cassandra.keyspace).read(k)
    texts = [read.summary.summary] if read.summary is not None else []
    texts += [e.message.content or "" for e in read.events]
    return [m for m in kept if not any(m in t for t in texts)]


@pytest.mark.parametrize("switch_first", [False, True], ids=["deleted-then-switched", "switched-then-deleted"])
async def test_a_switch_decided_after_a_deletion_brings_none_of_the_deleted_history_back(
    store: Store, switch_first: bool
) -> None:
    # e1, e2 summarized on the live line and by a replay; the session is deleted; the replay's switch is
    # decided after the deletion (its command is on the events topic behind the delete) with the replay's
    # heads, which cover the deleted e1, e2. The session starts again with e3 (stamped after the old
    # cutoff) and e4 (a client clock behind: stamped before it).
    k, book = key(), MarkerBook()
    await store.apply(*(record(EVENTS, marked(k, book, e, at), offset=o)
                        for e, at, o in (("e1", 1, 1001), ("e2", 2, 1002))))  # fmt: skip
    live = summary(k, 1, text=echo(book, k, "e1", "e2"), cutoff=2, last_event_id="e2")
    replayed = of_epoch(summary(k, 1, text="[新] " + echo(book, k, "e1", "e2"), cutoff=2, last_event_id="e2"), 1)
    await store.apply(summary_record(SUMMARIES, live, offset=40, events_offset=1002),
                      summary_record(REPLAY, replayed, offset=0, events_offset=1002))  # fmt: skip
    deleted_ms = now_ms()
    adopted = {**switch_at(k, 1, [(replayed, 1002)], previous=0, cid="c-del", replaced=[(live, 1002)]),
               "created_at": datetime.fromtimestamp(deleted_ms / 1000 + 1, UTC).isoformat()}  # fmt: skip
    restart = [record(EVENTS, marked(k, book, "e3", 3), offset=1004),
               record(EVENTS, marked(k, book, "e4", 0.5), offset=1005)]  # fmt: skip
    if switch_first:  # the projector's summaries consumer ran ahead of its events consumer
        await store.apply(record(SUMMARIES, adopted, offset=41))
        await store.apply(deletion(k, 1003, deleted_ms), *restart)
    else:
        await store.apply(deletion(k, 1003, deleted_ms), *restart)
        await store.apply(record(SUMMARIES, adopted, offset=41))
    assert await leaked(store, k, marks(book, k, "e1", "e2")) == []
    assert await unaccounted(store, k, marks(book, k, "e3", "e4")) == []


@pytest.mark.parametrize("order", ["switch-delete-summary", "delete-switch-summary"])
async def test_the_summaries_of_a_session_started_again_after_a_deletion_are_served_on_its_epoch(
    store: Store, order: str
) -> None:
    # The session was switched to epoch 1 (before its deletion, as the worker ordered them), then deleted
    # and started again; the live worker, still serving it from epoch 1, summarizes the new events e3..e5
    # as epoch 1 v2. That summary is what the worker rolls forward from now on: it must be the one served
    # (else the read shows a summary the worker no longer builds on, or none, and the events of every later
    # pass are covered by summaries no request ever shows). The switch precedes the summary on the summaries
    # topic; the deletion reaches the projector before or after the switch.
    k, book = key(), MarkerBook()
    await store.apply(*(record(EVENTS, marked(k, book, e, at), offset=o)
                        for e, at, o in (("e1", 1, 2001), ("e2", 2, 2002))))  # fmt: skip
    replayed = of_epoch(summary(k, 1, text=echo(book, k, "e1", "e2"), cutoff=2, last_event_id="e2"), 1)
    adopted = switch_at(k, 1, [(replayed, 2002)], previous=0, cid="c-keep")
    adopted["created_at"] = datetime.fromtimestamp(now_ms() / 1000 - 5, UTC).isoformat()
    deleted = [deletion(k, 2003, now_ms())]
    restart = [record(EVENTS, marked(k, book, e, at), offset=o) for e, at, o in (("e3", 3, 2004), ("e4", 4, 2005),
                                                                                 ("e5", 5, 2006))]  # fmt: skip
    after = of_epoch(summary(k, 2, text=echo(book, k, "e3", "e4"), cutoff=4, last_event_id="e4"), 1)
    steps = {
        "switch": [record(SUMMARIES, adopted, offset=50)],
        "delete": [*deleted, *restart],
        "summary": [summary_record(SUMMARIES, after, offset=51, events_offset=2005)],
    }
    for step in order.split("-"):
        await store.apply(*steps[step])
    read = await ContextReader(store.session, store.settings.cassandra.keyspace).read(k)
    assert read.served_epoch == 1
    assert read.summary is not None and (read.summary.epoch, read.summary.version) == (1, 2), read.summary
    assert await leaked(store, k, marks(book, k, "e1", "e2")) == []
    assert await unaccounted(store, k, marks(book, k, "e3", "e4", "e5")) == []


async def test_a_switch_after_a_deletion_of_a_switched_session_is_applied_and_served(store: Store) -> None:
    # Switched once (served_epoch set), deleted (the range delete keeps the static columns, so Cassandra
    # answers one row with a null filter key), then switched again: the second switch must be applied and
    # served, not refused over that row and dead-lettered.
    k = key()
    await store.apply(record(EVENTS, event(k, "e1", at=1), offset=3001))
    first = of_epoch(summary(k, 1, text="epoch one", cutoff=1, last_event_id="e1"), 1)
    await store.apply(
        summary_record(REPLAY, first, offset=0, events_offset=3001),
        record(SUMMARIES, switch_at(k, 1, [(first, 3001)], previous=0, cid="c-first"), offset=60),
    )
    assert await served(store, k) == {"": (1, 1, "epoch one")}
    await store.apply(deletion(k, 3002, now_ms()), record(EVENTS, event(k, "e2", at=2), offset=3003))
    assert await served(store, k) == {}
    second = of_epoch(summary(k, 1, text="epoch two", cutoff=2, last_event_id="e2"), 2)
    await store.apply(summary_record(REPLAY, second, offset=1, events_offset=3003))
    out = await store.apply(record(SUMMARIES, switch_at(k, 2, [(second, 3003)], previous=1, cid="c-again"), offset=61))
    assert (out.adoptions, out.dead_letters) == (1, [])
    assert await served(store, k) == {"": (2, 1, "epoch two")}
    read = await ContextReader(store.session, store.settings.cassandra.keyspace).read(k)
    assert read.served_epoch == 2
    assert read.summary is not None and (read.summary.epoch, read.summary.summary) == (2, "epoch two")
