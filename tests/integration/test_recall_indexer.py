"""The recall indexer as its own stage: findability of a planted recall set, the deletion barrier, resumability,
its lag, the binder and the executor it writes with. One keyspace for the module; unique sessions per test."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import pytest_asyncio

from projections import lexical, recall_search
from projections import statements as q
from projections.binding import RowBinder
from projections.cassandra_session import aexecute, aexecute_many
from projections.context_read import ContextReader
from projections.critical_gate import CriticalPathGate
from projections.indexer import RecallIndexer
from projections.projector import SourceRecord
from projections.recall_backfill import KEYS, add_session_tokens, backfill_session_tokens, source_query
from projections.rows import event_rows, recall_rows
from projections.stage import PartitionProgress
from schemas import SessionEvent, SessionKey
from schemas.settings import Settings
from tests.integration.test_projections_support import (
    EVENTS,
    Store,
    event,
    leased_store,
    record,
    summary,
)
from tests.support.keyspaces import KeyspacePool

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="session")]

_WORDS = ("worker", "request", "served", "status", "nominal", "queue", "latency", "shard", "replica", "cache")
_FILLER_CJK = "".join(chr(0x4E00 + i) for i in range(256))
"""CJK filler from one block that none of the planted facts' characters come from (no accidental bigrams)."""


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def store(service_settings: Settings, keyspaces: KeyspacePool) -> AsyncIterator[Store]:
    """One pooled keyspace for the module (the tests use sessions of their own)."""
    with leased_store(service_settings, keyspaces) as s:
        yield s


def _key(name: str) -> SessionKey:
    return SessionKey("idx", "alice", f"{name}-{uuid.uuid4().hex[:6]}")


def _call(call_id: str, name: str = "fetch") -> list[dict[str, Any]]:
    return [{"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}]


def _latin_filler(rng: random.Random, chars: int) -> str:
    lines: list[str] = []
    n = 0
    while n < chars:
        stamp = f"2025-03-01T12:{rng.randrange(60):02d}:{rng.randrange(60):02d}Z"
        line = (f"{stamp} {rng.choice(_WORDS)} {rng.choice(_WORDS)} {rng.randrange(10_000)} {rng.choice(_WORDS)} "
                f"in {rng.randrange(900)}ms")  # fmt: skip
        lines.append(line)
        n += len(line) + 1
    return "\n".join(lines)


def _cjk_filler(rng: random.Random, chars: int) -> str:
    return "".join(rng.choice(_FILLER_CJK) for _ in range(chars))


def _pseudo_word(rng: random.Random) -> str:
    return "".join(rng.choice("bcdfghjklmnprstvz") + rng.choice("aeiou") for _ in range(4))


def _recall_set(rng: random.Random, key: SessionKey, facts: int) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """Tool results of 10-80 KB, each with one fact planted at a random depth: ``(events, [(query, event id)])``.

    Every third is Chinese. The first three facts sit right at chunk
    boundaries (the first chunk's 8 Ki characters, the second's 32 Ki after).
    """
    events: list[dict[str, Any]] = []
    wanted: list[tuple[str, str]] = []
    boundaries = (8 * 1024 - 10, 8 * 1024 - 200 + 32 * 1024 - 15, 8 * 1024 + 5)  # across the first two chunk ends
    for n in range(facts):
        cjk = n % 3 == 2
        # CJK: a token per character (bigrams), so the documents are shorter in characters (25 Ki ≈ 75 KB).
        size = rng.randrange(9_000, 25_000) if cjk else rng.randrange(10_000, 80_000)
        if n < len(boundaries):
            size = max(size, boundaries[n] + 2_000)
        depth = boundaries[n] if n < len(boundaries) else rng.randrange(0, size)
        if cjk:
            code = "".join(rng.choice("零一二三四五六七八九") for _ in range(4))
            fact, query = f"退款编号{code}已经批准", f"退款编号{code}"
            filler = _cjk_filler(rng, size)
        else:
            code, name = str(rng.randrange(100_000, 999_999)), _pseudo_word(rng)
            fact, query = f" refund reference {code} approved by {name} ", f"{code} {name}"
            filler = _latin_filler(rng, size)
        depth = min(depth, len(filler))
        body = filler[:depth] + fact + filler[depth:]
        call = f"c{n}"
        events.append(event(key, f"a{n}", at=3 * n, role="assistant", content=None, tool_calls=_call(call)))
        events.append(event(key, f"t{n}", at=3 * n + 1, role="tool", content=body, tool_call_id=call, name="fetch"))
        wanted.append((query, f"t{n}"))
    return events, wanted


async def _index(store: Store, *records: SourceRecord) -> Any:
    async def sink(letter: Any) -> None:
        store.dead.append(letter)

    return await store.indexer.project(list(records), sink)


async def _project(store: Store, *records: SourceRecord) -> Any:
    async def sink(letter: Any) -> None:
        store.dead.append(letter)

    return await store.projector.project(list(records), sink)


def _recall_count(store: Store, key: SessionKey) -> int:
    ks = store.settings.cassandra.keyspace
    total = 0
    for table in q.RECALL_TABLES:
        rows = store.session.execute(
            f"SELECT count(*) FROM {ks}.{table} WHERE app_name = %s AND user_id = %s AND session_id = %s", tuple(key)
        )
        total += int(rows.one()[0])
    return total


def _delete(key: SessionKey) -> dict[str, Any]:
    return {"type": "delete_session", "command_id": uuid.uuid4().hex, "app_name": key.app_name,
            "user_id": key.user_id, "session_id": key.session_id}  # fmt: skip


async def test_a_recall_set_planted_deep_in_large_tool_results_is_found_once_indexed(store: Store) -> None:
    key = _key("recall-set")
    rng = random.Random(14)
    events, wanted = _recall_set(rng, key, facts=24)
    records = [record(EVENTS, e) for e in events]
    await _project(store, *records)
    # The critical path alone: the prompt's rows are there, search has nothing yet (the index is its own stage).
    assert len(await store.reader.events_after_boundary(key)) == len(events)
    assert await store.reader.session_search(key, wanted[0][0], "current_session") == []
    outcome = await _index(store, *records)
    assert outcome.events == len(wanted) and store.dead == []
    missed = []
    for query, event_id in wanted:
        hits = await store.reader.session_search(key, query, "current_session")
        if [h.event_id for h in hits][:1] != [event_id]:
            missed.append((query, event_id, [(h.event_id, h.score) for h in hits]))
    assert missed == []
    # Behind a summary boundary the same facts are hidden history, found in current_hidden.
    await store.summaries(summary(key, 1, text="looked things up", cutoff=3 * len(wanted), last_event_id=None))
    for query, event_id in wanted[:: len(wanted) // 4]:
        assert event_id in {h.event_id for h in await store.reader.session_search(key, query, "current_hidden")}


async def test_later_chunks_are_larger_and_cover_the_whole_document(store: Store) -> None:
    rng = random.Random(3)
    body = _latin_filler(rng, 100_000)
    ev = SessionEvent.model_validate(event(_key("chunks"), "t1", at=1, role="tool", content=body, tool_call_id="c1"))
    rows = recall_rows(ev, 1)
    assert rows is not None and 2 <= len(rows.chunks) <= 4  # 8 Ki first, then ~32 Ki chunks (was 12 of 8 Ki)
    assert all(len(str(c[9])) <= 32 * 1024 for c in rows.chunks)
    assert str(rows.chunks[-1][9]).endswith(body[-200:])


async def test_a_lagging_indexer_never_indexes_a_session_deleted_after_its_events(store: Store) -> None:
    key = _key("lagging")
    before = [record(EVENTS, event(key, f"e{i}", at=i, content=f"secret plan number {i} zephyr")) for i in range(3)]
    delete = record(EVENTS, _delete(key), timestamp_ms=int(time.time() * 1000))
    after = record(EVENTS, event(key, "n1", at=50, content="new life after the deletion zephyr"))
    await _project(store, *before, delete, after)  # the projector ran ahead: marker and deletion stored
    outcome = await _index(store, *before)  # the indexer, behind, reaches the deleted session's events
    assert outcome.skipped_deleted == 3 and _recall_count(store, key) == 0
    await _index(store, delete, after)
    hits = await store.reader.session_search(key, "zephyr", "current_session", top_k=10)
    assert [h.event_id for h in hits] == ["n1"]
    # A restarted indexer replaying everything again changes nothing.
    await _index(store, *before, delete, after)
    assert [h.event_id for h in await store.reader.session_search(key, "zephyr", "current_session")] == ["n1"]


async def test_a_deletion_landing_while_the_indexer_writes_removes_what_it_just_wrote(store: Store) -> None:
    key = _key("race")
    before = [record(EVENTS, event(key, f"e{i}", at=i, content=f"racing secret {i} quokka")) for i in range(3)]
    delete = record(EVENTS, _delete(key), timestamp_ms=int(time.time() * 1000) - 60_000)
    await _project(store, *before)
    indexer = store.indexer
    original = indexer._write_pipelined

    async def write_then_delete(*args: Any, **kwargs: Any) -> Any:
        rejected = await original(*args, **kwargs)
        await _project(store, delete)  # the projector applies the deletion between the indexer's write and check
        return rejected

    indexer._write_pipelined = write_then_delete  # type: ignore[method-assign]
    try:
        await _index(store, *before)
    finally:
        del indexer._write_pipelined
    assert _recall_count(store, key) == 0
    assert await store.reader.session_search(key, "quokka", "current_session") == []


async def test_a_deletion_applied_after_the_indexer_checked_leaves_no_deleted_text_searchable(store: Store) -> None:
    # The indexer, lagging behind the log, writes the rows of a session's events after the delete_session was
    # published (their write time is later than its stamp) and checks before the projector, also behind,
    # stored the marker. The projector's tombstone, stamped at the command, did not cover those rows:
    # session_search found the deleted text until the indexer reached the command itself.
    key = _key("after-check")
    before = [record(EVENTS, event(key, f"e{i}", at=i, content=f"hidden secret {i} 秘密 okapi")) for i in range(3)]
    delete = record(EVENTS, _delete(key), timestamp_ms=int(time.time() * 1000) - 60_000)
    assert all(r.offset < delete.offset for r in before)
    await _index(store, *before)  # written and checked: no marker yet
    await _project(store, *before, delete)
    assert await store.reader.session_search(key, "okapi", "current_session") == []
    assert await store.reader.session_search(key, "秘密", "current_session") == []
    assert _recall_count(store, key) == 0
    await _index(store, delete)
    assert _recall_count(store, key) == 0


async def test_a_faster_indexer_keeps_the_events_after_a_deletion(store: Store) -> None:
    key = _key("ahead")
    old = record(EVENTS, event(key, "e1", at=1, content="old words walrus"))
    five_seconds_ago = int((datetime.now(UTC) - timedelta(seconds=5)).timestamp() * 1000)
    delete = record(EVENTS, _delete(key), timestamp_ms=five_seconds_ago)
    new = record(EVENTS, event(key, "n1", at=50, content="new words walrus"))
    await _index(store, old, delete, new)  # the indexer is ahead of the projector
    await _project(store, old, delete, new)  # the projector's deletion (stamped at the command) spares n1
    assert [h.event_id for h in await store.reader.session_search(key, "walrus", "current_session")] == ["n1"]


async def test_the_indexer_resumes_from_its_own_offsets(store: Store) -> None:
    key = _key("offsets")
    records = [record(EVENTS, event(key, f"e{i}", at=i, content=f"offset word {i} narwhal"), partition=1,
                      offset=1000 + i) for i in range(4)]  # fmt: skip
    projector_before = await store.projector.load_offsets()
    await _index(store, *records[:2])
    assert (await store.indexer.load_offsets())[(EVENTS, 1)] == 1002
    assert await store.projector.load_offsets() == projector_before  # its own group, its own offsets
    await _index(store, *records)  # a redelivery after a crash before the offsets: the same rows
    assert (await store.indexer.load_offsets())[(EVENTS, 1)] == 1004
    assert _recall_count(store, key) == 8  # 4 documents, each with its context line


async def test_the_read_reports_the_index_lag_beside_the_projection_lag(store: Store) -> None:
    key = _key("lag")
    await _project(store, record(EVENTS, event(key, "u1", at=1), partition=7, offset=41))
    reader = ContextReader(store.session, store.settings.cassandra.keyspace)
    read = await reader.read(key)
    assert read.index_lag.known is False and (read.index_lag.topic, read.index_lag.partition) == (EVENTS, 7)
    await store.projector.save_progress([PartitionProgress(EVENTS, 7, 42, 42)])
    await store.indexer.save_progress([PartitionProgress(EVENTS, 7, 12, 42)])
    read = await reader.read(key)
    assert read.projection_lag.known and read.projection_lag.events_behind == 0
    assert read.projection_lag.seconds_behind == 0.0
    assert read.index_lag.known and read.index_lag.events_behind == 30 and read.index_lag.seconds_behind > 0


async def test_a_lone_surrogate_is_one_dead_letter_not_a_stuck_batch(store: Store) -> None:
    key = _key("surrogate")
    bad = record(EVENTS, event(key, "e1", at=1, content="broken \ud800 text"))
    good = record(EVENTS, event(key, "e2", at=2, content="fine text with an emoji \U0001f600 penguin"))
    dead_before = len(store.dead)
    outcome = await _project(store, bad, good)
    await _index(store, bad, good)
    letters = store.dead[dead_before:]
    assert [d.error_class for d in letters] == ["RecordDecodeError"] and "surrogate" in letters[0].reason
    assert outcome.events == 1
    assert [h.event_id for h in await store.reader.session_search(key, "penguin", "current_session")] == ["e2"]


async def test_the_row_binder_writes_what_the_driver_binds(store: Store) -> None:
    key = _key("binder")
    ks = store.settings.cassandra.keyspace
    call = _call("c1")
    values = [event(key, "a1", at=1, role="assistant", content=None, tool_calls=call),
              event(key, "t1", at=2.123456, role="tool", content="中文 result " * 2000, tool_call_id="c1"),
              event(key, "u1", at=-86400 * 365 * 60 + 0.5, content="before 1970")]  # fmt: skip
    values[2]["request_id"] = "r1"
    for n, value in enumerate(values):
        ev = SessionEvent.model_validate(value)
        rows = event_rows(ev, n, lambda m: 1)
        recall = recall_rows(ev, n)
        pairs = [(q.INSERT_EVENT, rows.event), (q.INSERT_EVENT_ID, rows.event_id)]
        pairs += [(q.INSERT_TURN, rows.turn)] if rows.turn else []
        pairs += [(q.INSERT_RECALL, recall.doc), *((q.INSERT_RECALL_CHUNK, c) for c in recall.chunks)] if recall else []
        for cql, row in pairs:
            prepared = store.session.prepare(cql.format(ks=ks))
            assert RowBinder(prepared).values(row) == prepared.bind(row).values


async def test_writes_leave_the_event_loop_free(store: Store) -> None:
    ks = store.settings.cassandra.keyspace
    prepared = store.session.prepare(f"SELECT * FROM {ks}.event_ids WHERE app_name = ? AND user_id = ? AND "
                                     "session_id = ?")  # fmt: skip
    ticks = 0
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.ensure_future(ticker())
    await asyncio.sleep(0)
    started = ticks
    results = await aexecute_many(store.session, [(prepared, ("a", "u", f"s{i}")) for i in range(400)], 2)
    during = ticks - started
    done.set()
    await task
    assert all(ok for ok, _ in results) and len(results) == 400
    assert during > 10  # the driver's execute_concurrent_async blocked the loop until all 400 were done


async def test_the_indexer_waits_while_the_projector_is_behind(store: Store) -> None:
    key = _key("gate")
    gate = CriticalPathGate(store.session, store.settings.cassandra.keyspace, check_s=0.05, max_wait_s=20)
    indexer = RecallIndexer(store.session, store.settings.cassandra.keyspace, events_topic=EVENTS,
                            consumer_group="g-gated", gate=gate)  # fmt: skip
    await store.projector.save_progress([PartitionProgress(EVENTS, 9, 100, 100 + 5000)])
    rec = record(EVENTS, event(key, "e1", at=1, content="gated words ibex"), partition=9, offset=100)
    task = asyncio.ensure_future(indexer.project([rec], _no_dead_letters))
    await asyncio.sleep(0.5)
    assert not task.done() and _recall_count(store, key) == 0  # the critical path first
    await store.projector.save_progress([PartitionProgress(EVENTS, 9, 5100, 5100)])  # caught up
    outcome = await asyncio.wait_for(task, 10)
    assert outcome.events == 1 and gate.waited_s >= 0.5


async def _no_dead_letters(letter: Any) -> None:
    raise AssertionError(f"unexpected dead letter: {letter}")


async def test_session_scopes_find_their_own_session_only_latin_and_cjk(store: Store) -> None:
    """Session scopes narrow through the session's token: nothing of another session of the tenant, CJK found.

    The other sessions hold the same words, sort before and after it in the tenant partition, one has an id
    that extends this one's, and one names this session's token in its text (no text yields a token).
    """
    key = _key("scope")
    tenant = (key.app_name, key.user_id)
    earlier, later = SessionKey(*tenant, "0" + key.session_id), SessionKey(*tenant, key.session_id + "x")
    forged = SessionKey(*tenant, "z" + key.session_id)
    words, chinese = "kubernetes rollout stalled", "数据库迁移失败了"
    mine = [event(key, "m1", at=1, content=f"the {words} again"), event(key, "m2", at=2, content=f"昨天{chinese}"),
            event(key, "m0", at=2.5, role="assistant", content=None, tool_calls=_call("c1"))]  # fmt: skip
    mine.append(event(key, "m3", at=3, role="tool", content=_latin_filler(random.Random(5), 20_000) + f" {words} "
                      + chinese, tool_call_id="c1"))  # fmt: skip
    others = [event(s, f"{s.session_id}-{n}", at=n, content=text)
              for s in (earlier, later, forged) for n, text in ((1, words), (2, chinese))]  # fmt: skip
    others.append(event(forged, "f3", at=3, content=f"{lexical.session_token(key.session_id)} {words} {chinese}"))
    dead = len(store.dead)
    await store.events(*others, *mine)
    await store.summaries(summary(key, 1, text="s", cutoff=3, last_event_id="m3"))
    assert store.dead[dead:] == []
    for query in (words, "kubernetes", chinese, "迁移"):
        for scope in ("current_session", "current_hidden"):
            hits = await store.reader.session_search(key, query, scope, top_k=10)
            assert {h.session_id for h in hits} == {key.session_id}, (query, scope)
            assert {h.event_id for h in hits} == ({"m1", "m3"} if query[0].isascii() else {"m2", "m3"}), (query, scope)
        others_hits = await store.reader.session_search(key, query, "other_sessions", top_k=10)
        assert {h.session_id for h in others_hits} == {earlier.session_id, later.session_id, forged.session_id}
    # The forged text is searchable as words, and finds only its own session.
    forged_hits = await store.reader.session_search(forged, "session " + key.session_id, "current_session")
    assert [h.event_id for h in forged_hits] == ["f3"]


async def test_rows_indexed_before_the_session_tokens_are_found_once_migration_008_backfills_them(
    store: Store,
) -> None:
    key, gone = _key("backfill"), _key("backfill-gone")
    ks = store.settings.cassandra.keyspace
    own = {lexical.session_token(key.session_id), lexical.session_token(gone.session_id)}
    body = _latin_filler(random.Random(9), 30_000) + " ocelot 猞猁出没"
    values = [event(key, "b1", at=1, content="the ocelot escaped"),
              event(key, "b2", at=2, role="tool", content=body, tool_call_id="c1"),
              event(gone, "g1", at=1, content="the ocelot of a deleted session")]  # fmt: skip
    for n, value in enumerate(values):  # what an indexer from before migration 008 wrote: no session token
        rows = recall_rows(SessionEvent.model_validate(value), n)
        assert rows is not None
        pairs = [(q.INSERT_RECALL, rows.doc), *((q.INSERT_RECALL_CHUNK, c) for c in rows.chunks)]
        for cql, row in pairs:
            tokens = row[-1]
            assert isinstance(tokens, set) and tokens & own
            store.session.execute(store.session.prepare(cql.format(ks=ks)), (*row[:-1], tokens - own))
    assert await store.reader.session_search(key, "ocelot", "current_session") == []  # the token is required
    stale = {table: list(store.session.execute(
        source_query(ks, table) + " WHERE app_name = %s AND user_id = %s AND session_id = %s", tuple(gone)))
        for table in KEYS}  # fmt: skip
    await store.indexer.project([record(EVENTS, _delete(gone))], _no_dead_letters)
    assert _recall_count(store, gone) == 0
    assert backfill_session_tokens(store.session, ks) >= 3
    for table, page in stale.items():  # a backfill that read the rows before the deletion landed
        add_session_tokens(store.session, ks, table, page)
    assert _recall_count(store, gone) == 0  # at the rows' own write time: the deletion still wins
    hits = await store.reader.session_search(key, "ocelot", "current_session", top_k=10)
    assert {h.event_id for h in hits} == {"b1", "b2"}
    # Their context lines were backfilled too: each hit shows the other as its neighbour.
    assert all(h.context.count("\n") == 1 for h in hits), [h.context for h in hits]
    assert "user: the ocelot escaped" in next(h.context for h in hits if h.event_id == "b2")
    deep = await store.reader.session_search(key, "猞猁", "current_session")
    assert [h.event_id for h in deep] == ["b2"]  # a later chunk (recall_chunks) was backfilled too


async def test_a_hits_context_shows_its_own_sessions_neighbours_never_a_deleted_past(store: Store) -> None:
    """The context lines (``recall_lines``) are the session's documents: other sessions never, deleted ones never."""
    key = _key("lines")
    neighbour = SessionKey(key.app_name, key.user_id, key.session_id + "x")  # sorts right after it
    old = [event(key, f"o{i}", at=i, content=f"old secret {i} of the deleted past") for i in range(3)]
    await store.events(*old, event(neighbour, "x1", at=5, content="neighbouring session line"))
    await store.events(_delete(key))
    new = [event(key, "n1", at=10, content="fresh start 新的开始"),
           event(key, "n2", at=11, content="the platypus 鸭嘴兽"),
           event(key, "n3", at=12, role="assistant", content="noted")]  # fmt: skip
    await store.events(*new)
    [hit] = await store.reader.session_search(key, "platypus", "current_session")
    assert hit.context == "user: fresh start 新的开始\n[match] user: the platypus 鸭嘴兽\nassistant: noted"
    [cjk] = await store.reader.session_search(key, "鸭嘴兽", "current_session")
    assert cjk.event_id == "n2" and cjk.context == hit.context


async def test_a_session_search_sends_only_the_statements_its_answer_needs(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every SAI statement of a session scope names the session's token; a compound question its first clause
    answers fetches no other clause (each fetch reads up to 40 rows, ~0.25 ms of Cassandra CPU a row)."""
    key = _key("plan")
    await store.events(*(event(key, f"c{i}", at=i, content=f"the cache warmed up {i}") for i in range(6)),
                       event(key, "k1", at=9, content="kafka consumer offset reset"))  # fmt: skip
    sent: list[tuple[str, tuple[Any, ...]]] = []

    def recording(session: Any, statement: Any, params: Any = None, **kwargs: Any) -> Any:
        sent.append((statement.query_string, tuple(params or ())))
        return aexecute(session, statement, params, **kwargs)

    monkeypatch.setattr(recall_search, "aexecute", recording)
    hits = await store.reader.session_search(
        key, "what did we decide about the cache, and the kafka consumer offset?", "current_session", top_k=5
    )
    assert {h.event_id for h in hits} <= {f"c{i}" for i in range(6)} and len(hits) == 5
    searched = [params for cql, params in sent if "tokens CONTAINS" in cql]
    assert searched and all(lexical.session_token(key.session_id) in params for params in searched)
    fetched = [params for cql, params in sent if "tokens CONTAINS" in cql and "LIMIT 1" not in cql]
    assert [p for p in fetched if "kafka" in p] == []  # the second clause was never needed


def _recall_seqs(store: Store, key: SessionKey, table: str) -> dict[str, int]:
    ks = store.settings.cassandra.keyspace
    rows = store.session.execute(
        f"SELECT event_id, seq FROM {ks}.{table} WHERE app_name = %s AND user_id = %s AND session_id = %s", tuple(key)
    )
    return {r.event_id: r.seq for r in rows}


@pytest.mark.parametrize("stamp", ["later", "same"])
@pytest.mark.parametrize("indexer", ["remembered", "restarted"])
async def test_an_event_published_again_is_indexed_where_the_projector_keeps_it(
    store: Store, indexer: str, stamp: str
) -> None:
    """A producer's retry logs e1 again after e2 (stamped later, or in e1's millisecond: then e1 sent again
    is not even late). The projector keeps e1 at its first position, so a summary up to e2 covers it; the
    recall rows say the same, and ``current_hidden`` finds it (Latin and CJK)."""
    key = _key("again")
    e1 = event(key, "e1", at=1, content="the otter reference 4711 海獭编号")
    e2 = event(key, "e2", at=2 if stamp == "later" else 1, role="assistant", content="noted")
    await store.apply(record(EVENTS, e1, offset=9_000), record(EVENTS, e2, offset=9_001))
    await store.summaries(summary(key, 1, text="s", cutoff=2, last_event_id="e2"))
    kept = store.indexer
    if indexer == "restarted":  # its memory of the session's latest timestamp is gone
        store.indexer = RecallIndexer(store.session, store.settings.cassandra.keyspace, events_topic=EVENTS,
                                      consumer_group="g-index")  # fmt: skip
    try:
        await store.apply(record(EVENTS, e1, offset=9_002), record(EVENTS, event(key, "e3", at=3), offset=9_003))
    finally:
        store.indexer = kept
    assert _recall_seqs(store, key, "events_by_session")["e1"] == 9_000  # the projector: where the log first had it
    assert _recall_seqs(store, key, "recall_docs")["e1"] == 9_000
    for query in ("otter 4711", "海獭编号"):
        hits = await store.reader.session_search(key, query, "current_hidden")
        assert [h.event_id for h in hits] == ["e1"], query
