"""One background sweep over a large table: the full scan it used to do against its index.

Builds ``--keys`` table values with the track handler (two events per session;
``--in-flight`` of them past the threshold, a job in flight since long ago),
stores them in a RocksDB (rocksdict, the production store's library: values are
the changelog bytes) and in a dict (the memory store), and prints µs per sweep:

* ``full scan``: what the sweep did, ``list(table.items())`` (RocksDB: every
  key and value decoded, as Faust's store does) and ``sweep_commands`` over all;
* ``index``: ``sweep_commands`` over :class:`~streams.app.sweep_watch.SweepWatch`
  entries (no table access), the idle sweep off and on;
* ``seed scan``: the one scan after an assignment (keys, then ``get`` + decode
  per key, yielding every 1000 keys), total and the longest stretch between
  two yields (what the other agents wait at most).

    .venv/bin/python -m benchmarks.bench_sweep [--keys N] [--in-flight F] [--repeat R]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import cast

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rocksdict import Rdict

from schemas import SessionEvent
from streams.app.coordinates import Coordinates
from streams.app.sweep import sweep_commands
from streams.app.sweep_watch import SweepWatch, seed
from streams.app.track import TrackHandler
from streams.app.tracked import TrackedKey
from streams.rules.checks import EventThreshold
from streams.rules.policy import PolicySet, SummaryPolicy

T0 = datetime(2026, 1, 1, tzinfo=UTC)
JOB_TIMEOUT_S = 120.0
IDLE_AFTER_S = 4 * 3600.0  # longer than the sessions have been quiet: only timed-out jobs are poked


def _event(session: str, n: int) -> SessionEvent:
    role = "user" if n % 2 == 0 else "assistant"
    return SessionEvent.model_validate({
        "app_name": "bench", "user_id": "u", "session_id": session, "event_id": f"{session}-e{n}",
        "timestamp": (T0 + timedelta(seconds=n)).isoformat(), "request_id": "r1",
        "author": "user" if role == "user" else "bot", "message": {"role": role, "content": f"message {n}"},
    })  # fmt: skip


def build_table(keys: int, in_flight: float) -> dict[str, TrackedKey]:
    """``keys`` sessions (full-session key only): most pending, ``in_flight`` of them with a job out."""
    table: dict[str, TrackedKey] = {}
    handler = TrackHandler(PolicySet(SummaryPolicy(checks=(EventThreshold(2),))), wall_clock=lambda: T0.timestamp())
    busy_every = max(1, round(1 / in_flight)) if in_flight > 0 else 0
    for i in range(keys):
        count = 4 if busy_every and i % busy_every == 0 else 2
        for n in range(count):
            handler.on_record(_event(f"s{i:07d}", n), Coordinates("events", i % 4, n), table)
    return table


def best_us(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--in-flight", type=float, default=0.01, help="share of keys with a job in flight")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    table = build_table(args.keys, args.in_flight)
    now = T0 + timedelta(hours=2)
    busy = sum(1 for v in table.values() if v.state.in_flight is not None)

    def sweep(entries: Iterable[TrackedKey], idle: float | None, at: datetime = now) -> int:
        return len(sweep_commands(entries, now=at, idle_after_s=idle, job_timeout_s=JOB_TIMEOUT_S))

    path = Path(tempfile.mkdtemp(prefix="bench-sweep-"))
    db = Rdict(str(path / "table"))
    try:
        for key, value in table.items():
            db[key.encode()] = value.to_bytes()

        def rocks_items() -> list[tuple[str, TrackedKey]]:
            return [(cast(bytes, k).decode(), TrackedKey.from_bytes(v)) for k, v in db.items()]

        def rocks_get(key: str) -> TrackedKey | None:
            raw = db.get(key.encode())
            return None if raw is None else TrackedKey.from_bytes(raw)

        print(f"{len(table)} keys, {busy} with a job in flight; best of {args.repeat}, µs per sweep")
        for idle in (None, IDLE_AFTER_S):
            label = "idle sweep on " if idle else "idle sweep off"
            watch = SweepWatch(idle=idle is not None)
            for key, value in table.items():
                watch.note(key, value)
            pokes = sweep(watch.entries(), idle)
            assert pokes == sweep((v for _, v in list(table.items())), idle)
            memory = best_us(lambda: sweep((v for _, v in list(table.items())), idle), args.repeat)  # noqa: B023
            rocks = best_us(lambda: sweep((v for _, v in rocks_items()), idle), args.repeat)  # noqa: B023
            index = best_us(lambda: sweep(watch.entries(), idle), args.repeat)  # noqa: B023
            quiet = best_us(lambda: sweep(watch.entries(), idle, T0), args.repeat)  # noqa: B023
            print(f"  {label}: {pokes:>5} pokes, {len(watch):>6} watched | full scan: rocksdb {rocks:>10,.0f} "
                  f"memory {memory:>8,.0f} | index {index:>7,.0f} (nothing due: {quiet:,.0f})")  # fmt: skip

        stalls: list[float] = []
        listing: list[float] = []

        async def seeded(watch: SweepWatch) -> float:
            mark = time.perf_counter()

            async def ticks() -> None:
                nonlocal mark
                while True:
                    await asyncio.sleep(0)
                    at = time.perf_counter()
                    stalls.append(at - mark)
                    mark = at

            ticker = asyncio.create_task(ticks())
            await asyncio.sleep(0)
            started = time.perf_counter()
            keys = [cast(bytes, k).decode() for k in db.keys()]  # noqa: SIM118  # a RocksDB key iterator, no value read
            listing.append(time.perf_counter() - started)
            await seed(watch, keys, rocks_get, interrupted=lambda: False)
            took = time.perf_counter() - started
            ticker.cancel()
            return took

        took = asyncio.run(seeded(SweepWatch(idle=False)))
        print(f"  seed scan (rocksdb, once per assignment): {took * 1e6:,.0f} µs in all, key listing "
              f"{listing[0] * 1e6:,.0f}, longest stretch without a yield {max(stalls) * 1e6:,.0f} µs")  # fmt: skip
    finally:
        db.close()
        Rdict.destroy(str(path / "table"))
        shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    main()
