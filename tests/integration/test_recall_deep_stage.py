"""The recall index's two stages against Cassandra: the primary stage finds first chunks, the deep stage the later
chunks of long documents; the deep stage follows the primary one, keeps deletions deleted (also far behind and
between its write and its check), keeps a re-published event where the log first had it, reports its own lag."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio

from projections.context_read import ContextReader
from projections.critical_gate import CriticalPathGate
from projections.indexer import DEEP_MAX_BEHIND, PrimaryBehind, RecallIndexer, deep_group_of, primary_gate
from projections.projector import SourceRecord
from projections.rows import MAX_INDEXED_CHARS
from projections.stage import INDEX_STAGE, PartitionProgress
from schemas import SessionKey
from schemas.settings import Settings
from tests.integration.test_projections_support import (
    EVENTS,
    Store,
    event,
    leased_store,
    record,
)
from tests.integration.test_recall_indexer import _call, _delete, _latin_filler, _recall_set

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="session")]


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def store(service_settings: Settings, keyspaces: Any) -> AsyncIterator[Store]:
    with leased_store(service_settings, keyspaces) as s:
        yield s


@dataclass
class Stages:
    primary: RecallIndexer
    deep: RecallIndexer


@pytest.fixture()
def stages(store: Store) -> Stages:
    """A primary and a deep stage of their own groups (a test's offsets are its own)."""
    group = f"g-ix-{uuid.uuid4().hex[:6]}"
    ks = store.settings.cassandra.keyspace
    primary = RecallIndexer(store.session, ks, events_topic=EVENTS, consumer_group=group, scope="primary")
    deep = RecallIndexer(store.session, ks, events_topic=EVENTS, consumer_group=deep_group_of(group), scope="deep",
                         primary_wait_s=5.0, primary_check_s=0.02)  # fmt: skip
    return Stages(primary, deep)


def _key(name: str) -> SessionKey:
    return SessionKey("deep", "bob", f"{name}-{uuid.uuid4().hex[:6]}")


async def _no_dead_letters(letter: Any) -> None:
    raise AssertionError(f"unexpected dead letter: {letter}")


async def _run(stage: Any, *records: SourceRecord) -> Any:
    return await stage.project(list(records), _no_dead_letters)


def _chunks(store: Store, key: SessionKey) -> list[Any]:
    ks = store.settings.cassandra.keyspace
    return list(store.session.execute(f"SELECT event_id, chunk, seq FROM {ks}.recall_chunks WHERE app_name = %s AND "
                                      "user_id = %s AND session_id = %s", tuple(key)))  # fmt: skip


async def _found(store: Store, key: SessionKey, query: str) -> list[str]:
    return [h.event_id for h in await store.reader.session_search(key, query, "current_session", top_k=10)]


def _long_result(key: SessionKey, event_id: str, at: float, fact: str, *, seed: int) -> dict[str, Any]:
    """A 40 KB tool result with ``fact`` at 30 K characters: in a later chunk, never in the first."""
    filler = _latin_filler(random.Random(seed), 40_000)
    return event(key, event_id, at=at, role="tool", content=filler[:30_000] + f" {fact} " + filler[30_000:],
                 tool_call_id=f"c-{event_id}", name="fetch")  # fmt: skip


async def test_first_chunks_are_the_primary_stages_and_deep_facts_the_deep_stages(store: Store, stages: Stages) -> None:
    key = _key("split")
    events, wanted = _recall_set(random.Random(14), key, facts=24)
    records = [record(EVENTS, e) for e in events]
    await store.projector.project(records, _no_dead_letters)
    bodies = {e["event_id"]: e["message"]["content"] for e in events if e["message"]["role"] == "tool"}

    def where(query: str, event_id: str) -> str:
        if not query.isascii():  # a CJK first chunk ends at its token cap, well before 8 Ki characters
            return "edge"
        at = bodies[event_id].find(query.split()[0])
        return "first" if 0 <= at < MAX_INDEXED_CHARS - 400 else "deep" if at > MAX_INDEXED_CHARS + 400 else "edge"

    places = {q: where(q, e) for q, e in wanted}
    assert sorted(set(places.values()) - {"edge"}) == ["deep", "first"]
    outcome = await _run(stages.primary, *records)
    assert outcome.events == len(wanted) and _chunks(store, key) == []  # the primary stage writes no later chunk
    for query, event_id in wanted:
        hits = await _found(store, key, query)
        if places[query] == "first":
            assert hits[:1] == [event_id], query
        elif places[query] == "deep":
            assert event_id not in hits, query  # only in a later chunk: not searchable before the deep stage
    deep_outcome = await _run(stages.deep, *records)
    assert deep_outcome.events == len(wanted) and stages.deep.indexed_tokens > stages.primary.indexed_tokens
    missed = [(q, e, hits) for q, e in wanted if (hits := await _found(store, key, q))[:1] != [e]]
    assert missed == []  # both stages caught up: every planted fact is found
    assert (await stages.deep.load_offsets())[(EVENTS, 0)] == records[-1].offset + 1  # its own group's offsets


async def test_the_deep_stage_never_passes_the_primary_stage(store: Store, stages: Stages) -> None:
    key = _key("follow")
    big = record(EVENTS, _long_result(key, "t1", 1, "armadillo 4417", seed=1), partition=3, offset=500)
    await store.projector.project([big], _no_dead_letters)
    task = asyncio.ensure_future(_run(stages.deep, big))
    await asyncio.sleep(0.3)
    assert not task.done() and _chunks(store, key) == []  # the primary has not indexed it: the deep stage waits
    await _run(stages.primary, big)
    outcome = await asyncio.wait_for(task, 10)
    assert outcome.events == 1 and await _found(store, key, "armadillo 4417") == ["t1"]
    # A primary stage that does not come: the batch is given back to the runner (retried after its backoff).
    later = record(EVENTS, _long_result(key, "t2", 2, "pangolin 1212", seed=2), partition=3, offset=501)
    stages.deep.primary_wait_s = 0.2
    with pytest.raises(PrimaryBehind):
        await _run(stages.deep, later)
    assert (await stages.deep.load_offsets())[(EVENTS, 3)] == 501


async def test_the_deep_stage_yields_while_the_primary_stage_is_behind(store: Store, stages: Stages) -> None:
    key = _key("yield")
    ks = store.settings.cassandra.keyspace
    gate = CriticalPathGate(store.session, ks, stage=INDEX_STAGE, max_behind=DEEP_MAX_BEHIND, check_s=0.05,
                            max_wait_s=20)  # fmt: skip
    deep = RecallIndexer(store.session, ks, events_topic=EVENTS, consumer_group=stages.deep.consumer_group,
                         scope="deep", gate=gate)  # fmt: skip
    big = record(EVENTS, _long_result(key, "t1", 1, "aardvark 6060", seed=8), partition=13, offset=700)
    await _run(stages.primary, big)
    await stages.primary.save_progress([PartitionProgress(EVENTS, 13, 701, 701 + 5000)])  # far behind the log
    task = asyncio.ensure_future(_run(deep, big))
    await asyncio.sleep(0.5)
    assert not task.done() and _chunks(store, key) == []  # what everything searchable needs first
    await stages.primary.save_progress([PartitionProgress(EVENTS, 13, 5701, 5701)])  # caught up
    outcome = await asyncio.wait_for(task, 10)
    assert outcome.events == 1 and await _found(store, key, "aardvark 6060") == ["t1"]


async def test_a_deep_stage_whose_primary_stays_behind_gives_its_batch_back_instead_of_going_on(
    store: Store, stages: Stages
) -> None:
    # What `distill indexer --deep` runs with: past its wait the gate raises, the runner holds the batch.
    key = _key("holds")
    ks = store.settings.cassandra.keyspace
    gate = primary_gate(store.session, ks, check_s=0.05, max_wait_s=0.3)
    deep = RecallIndexer(store.session, ks, events_topic=EVENTS, consumer_group=stages.deep.consumer_group,
                         scope="deep", gate=gate)  # fmt: skip
    big = record(EVENTS, _long_result(key, "t1", 1, "quokka 5151", seed=11), partition=14, offset=900)
    await _run(stages.primary, big)
    await stages.primary.save_progress([PartitionProgress(EVENTS, 14, 901, 901 + 5000)])  # far behind the log
    with pytest.raises(PrimaryBehind, match=rf"more than {DEEP_MAX_BEHIND} records behind on .*\[14\]"):
        await _run(deep, big)
    assert _chunks(store, key) == [] and (EVENTS, 14) not in await deep.load_offsets()
    await stages.primary.save_progress([PartitionProgress(EVENTS, 14, 5901, 5901)])  # caught up: it goes on
    outcome = await _run(deep, big)
    assert outcome.events == 1 and await _found(store, key, "quokka 5151") == ["t1"]


async def test_a_deep_stage_behind_a_deletion_never_brings_the_session_back(store: Store, stages: Stages) -> None:
    key = _key("deleted")
    before = [record(EVENTS, _long_result(key, f"t{i}", i, f"secret vault code {7700 + i} okapi", seed=i))
              for i in range(3)]  # fmt: skip
    delete = record(EVENTS, _delete(key), timestamp_ms=int(time.time() * 1000))
    after = record(EVENTS, _long_result(key, "n1", 50, "fresh start code 9911 okapi", seed=9))
    await store.projector.project([*before, delete, after], _no_dead_letters)
    await _run(stages.primary, *before, delete, after)  # the primary stage removed the session, then indexed n1
    outcome = await _run(stages.deep, *before)  # the deep stage, far behind, reaches the deleted events
    assert outcome.skipped_deleted == 3 and outcome.events == 0 and _chunks(store, key) == []
    assert await _found(store, key, "vault code 7701") == []
    await _run(stages.deep, delete, after)  # it deletes nothing itself: the new life of the session stays
    assert await _found(store, key, "fresh start code 9911") == ["n1"]
    assert {r.event_id for r in _chunks(store, key)} == {"n1"}
    await _run(stages.deep, *before, delete, after)  # a restarted deep stage replaying all of it changes nothing
    assert {r.event_id for r in _chunks(store, key)} == {"n1"} and await _found(store, key, "vault code 7702") == []


async def test_a_deletion_without_its_marker_yet_is_kept_by_the_primary_rows(store: Store, stages: Stages) -> None:
    # The primary stage removed the session (it consumed the command) before the projector stored its marker.
    key = _key("no-marker")
    big = record(EVENTS, _long_result(key, "t1", 1, "hidden ledger 5150 tapir", seed=4))
    delete = record(EVENTS, _delete(key), timestamp_ms=int(time.time() * 1000) - 60_000)
    await _run(stages.primary, big, delete)
    outcome = await _run(stages.deep, big)
    assert outcome.skipped_deleted == 1 and _chunks(store, key) == []


async def test_a_deletion_landing_while_the_deep_stage_writes_is_never_searchable(store: Store, stages: Stages) -> None:
    key = _key("race")
    big = record(EVENTS, _long_result(key, "t1", 1, "racing ledger 3141 quokka", seed=5))
    delete = record(EVENTS, _delete(key), timestamp_ms=int(time.time() * 1000) - 60_000)  # published a while ago
    await store.projector.project([big], _no_dead_letters)
    await _run(stages.primary, big)
    deep = stages.deep
    original = deep._write_pipelined
    between: list[list[str]] = []

    async def delete_then_write(*args: Any, **kwargs: Any) -> Any:
        # The deletion lands after the deep stage's first check, before its write.
        await store.projector.project([delete], _no_dead_letters)
        await _run(stages.primary, delete)
        rejected = await original(*args, **kwargs)
        assert {r.event_id for r in _chunks(store, key)} == {"t1"}  # the rows just written are there ...
        between.append(await _found(store, key, "racing ledger 3141"))  # ... and not searchable
        return rejected

    deep._write_pipelined = delete_then_write  # type: ignore[method-assign]
    try:
        await _run(deep, big)
    finally:
        del deep._write_pipelined
    assert between == [[]]
    assert _chunks(store, key) == []  # and the second check removed them


async def test_a_republished_event_keeps_its_first_position_in_the_deep_stage(store: Store, stages: Stages) -> None:
    key = _key("again")
    call = event(key, "a1", at=1, role="assistant", content=None, tool_calls=_call("c1"))
    value = _long_result(key, "t1", 2, "echo marker 2718 lemur", seed=6)
    first, other = (
        record(EVENTS, call, offset=9_001),
        record(EVENTS, event(key, "u2", at=3, content="next"), offset=9_003),
    )
    again = record(EVENTS, value, offset=9_500)  # a producer's retry, logged later
    original = record(EVENTS, value, offset=9_002)
    await _run(stages.primary, first, original, other, again)
    await _run(stages.deep, first, original, other)
    # A restarted deep stage (nothing remembered) reaches the copy logged later.
    fresh = RecallIndexer(store.session, store.settings.cassandra.keyspace, events_topic=EVENTS,
                          consumer_group=stages.deep.consumer_group, scope="deep")  # fmt: skip
    await _run(fresh, again)
    rows = _chunks(store, key)
    assert rows and {r.seq for r in rows} == {9_002}


async def test_the_read_reports_the_deep_stages_lag_beside_the_others(store: Store, stages: Stages) -> None:
    key = _key("lag")
    await store.projector.project([record(EVENTS, event(key, "u1", at=1), partition=11, offset=41)],
                                  _no_dead_letters)  # fmt: skip
    reader = ContextReader(store.session, store.settings.cassandra.keyspace)
    read = await reader.read(key)
    assert read.deep_index_lag.known is False
    await store.projector.save_progress([PartitionProgress(EVENTS, 11, 42, 42)])
    await stages.primary.save_progress([PartitionProgress(EVENTS, 11, 40, 42)])
    await stages.deep.save_progress([PartitionProgress(EVENTS, 11, 12, 42)])
    read = await reader.read(key)
    assert read.projection_lag.known and read.projection_lag.events_behind == 0  # the deep stage is no projector
    assert read.index_lag.events_behind == 2
    assert read.deep_index_lag.known and read.deep_index_lag.events_behind == 30
    assert read.deep_index_lag.seconds_behind > 0
