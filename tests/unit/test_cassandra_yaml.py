"""The local Cassandra's configuration (``streams.services.cassandra.cassandra_yaml``)."""

from __future__ import annotations

from pathlib import Path

from schemas.settings import ServicesSettings
from streams.services.cassandra import cassandra_yaml


def _section(yaml: str, name: str) -> list[str]:
    """The lines of the top-level ``name:`` section (up to the next top-level key)."""
    lines = yaml.splitlines()
    start = lines.index(f"{name}:")
    out: list[str] = []
    for line in lines[start + 1 :]:
        if line and not line.startswith((" ", "#")):
            break
        out.append(line.strip())
    return out


def test_every_table_gets_a_trie_memtable_and_skiplist_stays_available(tmp_path: Path) -> None:
    # The recall index's SAI postings dominate Cassandra's CPU per event; the trie memtable takes ~15% off it.
    memtable = _section(cassandra_yaml(ServicesSettings(), tmp_path), "memtable")
    assert memtable[:2] == ["configurations:", "skiplist:"]
    pairs = dict(zip(memtable[1::2], memtable[2::2], strict=False))
    assert pairs["skiplist:"] == "class_name: SkipListMemtable"
    assert pairs["trie:"] == "class_name: TrieMemtable"
    assert pairs["default:"] == "inherits: trie"
