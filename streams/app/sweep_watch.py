"""The keys the sweep can need to poke, kept current on every table write (pure).

:func:`~streams.app.sweep.sweep_commands` only ever pokes a key with a job in
flight (emission time known: job timeout) or, when the idle sweep is on, a key
with pending content and no job in flight. Every other
value is skipped whatever the clock says, so the sweep looks at this index
instead of decoding the whole table (a RocksDB table decodes every value it
lists: seconds of event-loop time at 100k+ sessions).

The index is fed by :meth:`SweepWatch.note` at every table write and delete;
a state recovered from the changelog (never written through the agents of
this worker) enters it by a one-off scan after the assignment.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, ValuesView

from streams.app.sweep import pokable
from streams.app.tracked import TrackedKey


class SweepWatch:
    """Table key → value, for the values :func:`~streams.app.sweep.sweep_commands` can poke."""

    __slots__ = ("_entries", "idle", "needs_scan")

    def __init__(self, *, idle: bool) -> None:
        self.idle = idle
        """Watch idle keys too (pending content, no job): only when the idle sweep is on."""
        self.needs_scan = False
        """Set on an assignment: the table holds states not noted yet (recovered); see :func:`seed`."""
        self._entries: dict[str, TrackedKey] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def watches(self, value: TrackedKey) -> bool:
        """Whether the sweep can poke ``value`` at some time (the clock aside): :func:`~streams.app.sweep.pokable`."""
        return pokable(value, idle=self.idle)

    def note(self, key: str, value: TrackedKey | None) -> None:
        """The table's ``key`` now holds ``value`` (``None``: deleted)."""
        if value is not None and self.watches(value):
            self._entries[key] = value
        else:
            self._entries.pop(key, None)

    def drop_partitions(self, partitions: Iterable[int]) -> None:
        """Forget the keys of revoked partitions (a value without a partition stays)."""
        gone = set(partitions)
        if not gone:
            return
        for key in [k for k, v in self._entries.items() if v.partition in gone]:
            del self._entries[key]

    def entries(self) -> ValuesView[TrackedKey]:
        """The watched values (a live view: do not write the table while iterating it)."""
        return self._entries.values()


async def seed(
    watch: SweepWatch,
    keys: Iterable[str],
    get: Callable[[str], TrackedKey | None],
    *,
    interrupted: Callable[[], bool],
    chunk: int = 1000,
) -> bool:
    """Note the current value of every key, yielding to the loop every ``chunk`` keys.

    ``keys`` is a snapshot (a store's dict cannot be iterated across awaits); a key
    written or deleted meanwhile is read as it is now. ``False``: ``interrupted()``
    said so at a yield (a rebalance), the scan is to be run again.
    """
    for n, key in enumerate(keys, 1):
        watch.note(key, get(key))
        if n % chunk == 0:
            await asyncio.sleep(0)
            if interrupted():
                return False
    return True
