"""The track agent's write-back overlay: reads see the batch's writes, each key is written once."""

from __future__ import annotations

from streams.app.batch import TableBatch
from streams.app.tracked import TrackedKey
from streams.rules.trigger_state import new_state


def tracked(session: str, version: int = 0) -> TrackedKey:
    state = new_state("a", "u", session, "")
    state.version = version
    return TrackedKey(state)


def test_reads_see_the_batch_and_the_last_write_per_key_wins() -> None:
    table = {"k1": tracked("s1")}
    batch = TableBatch(table)
    assert batch.get("k1") is table["k1"] and batch.get("k2") is None
    batch.partition = 2
    batch["k2"] = tracked("s2", 1)
    batch["k2"] = last = tracked("s2", 2)
    batch.partition = 0
    batch["k1"] = first = tracked("s1", 5)
    assert batch.get("k2") is last and table == {"k1": table["k1"]}  # nothing written through yet
    assert batch.drain() == {2: [("k2", last)], 0: [("k1", first)]}
    assert len(batch) == 0 and batch.get("k2") is None


def test_deletes_hide_the_table_value() -> None:
    table = {"k1": tracked("s1")}
    batch = TableBatch(table)
    del batch["k1"]
    assert batch.get("k1") is None
    assert batch.drain() == {0: [("k1", None)]}
