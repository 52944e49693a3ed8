"""Garbage-collector settings for a worker holding a large track table.

The table keeps several container objects per tracked key (state, pending
list, scopes, counters), so a worker tracking 100k sessions has about a
million objects the cyclic collector scans. With CPython's default thresholds
(700, 10, 10) it collects after every 700 net allocations and rescans the
whole heap whenever it grew by a quarter: while the table grows this was about
two thirds of the CPU of folding a new session, with full-collection pauses of
hundreds of milliseconds (which also land on event→job latency).

Table objects are freed by reference counting (they form no cycles); the
collector is only needed for the cyclic garbage of asyncio and the libraries,
which larger thresholds still collect, just less often. Not too seldom for the
youngest generation, though: some of that garbage holds fetched record buffers,
and with a young collection every 50,000 allocations a worker whose jobs fetched
their events from Kafka (a backlog past its record buffer) peaked at 2.6 GiB
(424 MiB with CPython's defaults). Young collections every 2,000 allocations,
with the older generations' counts raised so a full collection is as rare as
before: 629 MiB there, and the same CPU per event while a 100k-session table
grows (``bench_backlog.py``).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager

GC_THRESHOLDS = (2_000, 100, 100)
"""Allocations before a young collection, and young/middle collections before the next older one
(a full collection every 20M allocations, at most, as with the earlier ``(50_000, 20, 20)``)."""


def tune_gc() -> None:
    """Raise the collector thresholds and move everything alive now (imports, settings) out of its scans.

    Call once at worker start, before the app runs: the one full collection
    here runs before any record is processed.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


@contextmanager
def tuned_gc() -> Iterator[Callable[[], None]]:
    """:func:`tune_gc` for a block (an in-process replay), the previous thresholds back after it.

    A replay builds the states and parsed events of every session it reads: with
    the default thresholds the collector rescans that growing heap again and again
    (about a sixth of a full-cache-hit replay's CPU). What was frozen before the
    block stays frozen; what the block froze is thawed again.

    Yields ``settle``: the block calls it now and then to freeze what it built so far
    (what a replay keeps lives until its end). Without it every object the replay
    keeps is scanned again by each middle-generation collection (a tenth of a
    full-cache-hit replay's CPU); frozen, only by the young collection it was made
    in. A no-op when something was frozen before the block: what the block froze
    then stays frozen after it, and it freezes no more than at its start.
    """
    before = gc.get_threshold()
    frozen = gc.get_freeze_count()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)

    def settle() -> None:
        if not frozen:
            gc.freeze()

    try:
        yield settle
    finally:
        gc.set_threshold(*before)
        if not frozen:
            gc.unfreeze()
