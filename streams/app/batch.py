"""Write-back overlay of the track table for one batch of records.

Every table write is a changelog record (serialized state, produced to
Kafka). Within a batch, a session's key is often written once per event;
only the last value matters, so the track agent folds a batch of records
through this overlay and writes each changed key to the table once, with
the partition of the record that changed it last (the changelog partition
is the source partition: table, events, jobs and summaries are
co-partitioned).

The fold is synchronous (no ``await`` between reading a key and flushing
it), so the absorb agent, which writes the same table from the summaries
topic, never interleaves with a batch: nothing it writes can be overwritten
by a stale overlay value.
"""

from __future__ import annotations

from typing import Protocol

from streams.app.tracked import TrackedKey


class Table(Protocol):
    def get(self, key: str) -> TrackedKey | None: ...


_DELETED = None


class TableBatch:
    """A :class:`~streams.app.track.StateStore` buffering writes until :meth:`flush`."""

    __slots__ = ("_dirty", "_table", "partition")

    def __init__(self, table: Table) -> None:
        self._table = table
        self._dirty: dict[str, tuple[int, TrackedKey | None]] = {}
        self.partition = 0
        """Partition of the record being folded: the changelog partition of its writes."""

    def __len__(self) -> int:
        return len(self._dirty)

    def get(self, key: str) -> TrackedKey | None:
        found = self._dirty.get(key)
        if found is not None:
            return found[1]
        return self._table.get(key)

    def __setitem__(self, key: str, value: TrackedKey) -> None:
        self._dirty[key] = (self.partition, value)

    def __delitem__(self, key: str) -> None:
        self._dirty[key] = (self.partition, _DELETED)

    def drain(self) -> dict[int, list[tuple[str, TrackedKey | None]]]:
        """The changed keys (``None``: deleted) by partition, each once; the overlay is emptied."""
        by_partition: dict[int, list[tuple[str, TrackedKey | None]]] = {}
        for key, (partition, value) in self._dirty.items():
            by_partition.setdefault(partition, []).append((key, value))
        self._dirty.clear()
        return by_partition
