"""The job pool: concurrency across keys, order within a key, acks in offset order."""

from __future__ import annotations

import asyncio

from streams.app.cache import SummaryCache, input_hash
from streams.app.pool import JobPool


async def test_same_key_serial_other_keys_concurrent_and_acks_in_order() -> None:
    pool = JobPool(concurrency=2)
    running: dict[str, int] = {}
    peak = {"a": 0, "all": 0}
    acked: list[int] = []

    def job(key: str, delay: float):
        async def run() -> None:
            running[key] = running.get(key, 0) + 1
            peak["a"] = max(peak["a"], running.get("a", 0))
            peak["all"] = max(peak["all"], sum(running.values()))
            await asyncio.sleep(delay)
            running[key] -= 1

        return run

    await pool.submit("a", 0, 0, job("a", 0.05), lambda: acked.append(0))
    await pool.submit("a", 0, 1, job("a", 0.01), lambda: acked.append(1))
    await pool.submit("b", 0, 2, job("b", 0.0), lambda: acked.append(2))
    await pool.drain()
    assert peak["a"] == 1 and peak["all"] == 2
    assert acked == [0, 1, 2]


async def test_a_failed_job_is_never_acked_nor_anything_after_it() -> None:
    pool = JobPool(concurrency=2)
    acked: list[int] = []

    async def boom() -> None:
        raise asyncio.CancelledError

    async def ok() -> None:
        return None

    await pool.submit("a", 0, 0, boom, lambda: acked.append(0))
    await pool.submit("b", 0, 1, ok, lambda: acked.append(1))
    await asyncio.sleep(0.05)
    assert acked == []


def test_input_hash_changes_with_every_input() -> None:
    base = dict(filter_key="", force=False, prompt_version="p1", model="m")
    h = input_hash("prev", [b"e1"], **base)  # type: ignore[arg-type]
    assert h == input_hash("prev", [b"e1"], **base)  # type: ignore[arg-type]
    assert h != input_hash("prev2", [b"e1"], **base)  # type: ignore[arg-type]
    assert h != input_hash("prev", [b"e1", b"e2"], **base)  # type: ignore[arg-type]
    assert h != input_hash("prev", [b"e1"], **{**base, "model": "other"})  # type: ignore[arg-type]
    cache = SummaryCache(max_entries=1)
    cache.put("x", object())  # type: ignore[arg-type]
    cache.put("y", object())  # type: ignore[arg-type]
    assert cache.get("x") is None and cache.get("y") is not None
