"""The sweep's index: the keys it can poke, kept current by the table writes; the seed scan."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta

import pytest

from streams.app.coordinates import Coordinates
from streams.app.sweep import sweep_commands
from streams.app.sweep_watch import SweepWatch, seed
from streams.app.tracked import TrackedKey, table_key
from tests.unit.app.test_track_handler import T0, event, handler

KEY = table_key("a", "u", "s", "")


def idle_value() -> TrackedKey:
    """Pending content, no job in flight (threshold not reached)."""
    table: dict[str, TrackedKey] = {}
    h = handler(threshold=100)
    for i, e in enumerate([event(1, "user"), event(2)]):
        h.on_record(e, Coordinates("ev", 1, i), table)
    return table[KEY]


def in_flight_value(wall: float = 1000.0) -> TrackedKey:
    table: dict[str, TrackedKey] = {}
    h = handler(threshold=1, wall_clock=lambda: wall)
    for i, e in enumerate([event(1, "user"), event(2)]):
        h.on_record(e, Coordinates("ev", 1, i), table)
    value = table[KEY]
    assert value.state.in_flight is not None and value.emitted_wall == wall
    return value


def test_a_job_in_flight_is_watched_until_its_key_is_released_or_deleted() -> None:
    watch = SweepWatch(idle=False)
    busy = in_flight_value()
    watch.note(KEY, busy)
    assert KEY in watch and list(watch.entries()) == [busy]
    released = replace(busy, state=replace(busy.state.copy(), in_flight=None), emitted_wall=None)
    watch.note(KEY, released)
    assert KEY not in watch
    watch.note(KEY, busy)
    watch.note(KEY, None)
    assert len(watch) == 0


def test_idle_keys_are_watched_only_when_the_idle_sweep_is_on() -> None:
    off, on = SweepWatch(idle=False), SweepWatch(idle=True)
    for watch in (off, on):
        watch.note(KEY, idle_value())
    assert KEY not in off and KEY in on


def test_a_job_without_an_emission_time_is_not_watched_the_sweep_never_pokes_it() -> None:
    watch = SweepWatch(idle=True)
    watch.note(KEY, replace(in_flight_value(), emitted_wall=None))
    assert KEY not in watch


def test_the_index_yields_the_commands_the_full_table_yields() -> None:
    """Whatever the clock: the skipped values are the ones sweep_commands never pokes."""
    values = [idle_value(), in_flight_value(T0.timestamp()), replace(in_flight_value(), emitted_wall=None)]
    values.append(replace(idle_value(), emitted_wall=5.0))
    table = {f"k{i}": v for i, v in enumerate(values)}
    for idle_after in (None, 60.0):
        watch = SweepWatch(idle=idle_after is not None)
        for k, v in table.items():
            watch.note(k, v)
        for later in (timedelta(seconds=1), timedelta(hours=1)):
            kw = {"now": T0 + later, "idle_after_s": idle_after, "job_timeout_s": 120.0}
            assert sweep_commands(watch.entries(), **kw) == sweep_commands(table.values(), **kw)
        assert sweep_commands(watch.entries(), now=T0 + timedelta(hours=1), idle_after_s=idle_after, job_timeout_s=120)


def test_revoked_partitions_are_forgotten() -> None:
    watch = SweepWatch(idle=False)
    busy = in_flight_value()
    watch.note("p1", replace(busy, partition=1))
    watch.note("p2", replace(busy, partition=2))
    watch.note("none", replace(busy, partition=None))
    watch.drop_partitions({1, 3})
    assert "p1" not in watch and "p2" in watch and "none" in watch


async def test_seed_notes_the_current_values_yielding_every_chunk() -> None:
    busy = in_flight_value()
    table = {f"k{i}": busy if i % 2 else idle_value() for i in range(10)}
    watch = SweepWatch(idle=False)
    watch.note("gone", busy)  # deleted meanwhile: the scan reads None
    yields = 0
    done = asyncio.Event()

    async def count_yields() -> None:
        nonlocal yields
        while not done.is_set():
            yields += 1
            await asyncio.sleep(0)

    counter = asyncio.create_task(count_yields())
    await asyncio.sleep(0)
    assert await seed(watch, [*table, "gone"], table.get, interrupted=lambda: False, chunk=3)
    done.set()
    await counter
    assert sorted(k for k in table if k in watch) == ["k1", "k3", "k5", "k7", "k9"] and "gone" not in watch
    assert yields >= 3


@pytest.mark.parametrize("at", [1, 2])
async def test_seed_stops_when_interrupted_at_a_yield(at: int) -> None:
    table = {f"k{i}": in_flight_value() for i in range(10)}
    checks = 0

    def interrupted() -> bool:
        nonlocal checks
        checks += 1
        return checks >= at

    watch = SweepWatch(idle=False)
    assert not await seed(watch, list(table), table.get, interrupted=interrupted, chunk=4)
    assert len(watch) == 4 * at
