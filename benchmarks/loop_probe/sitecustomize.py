"""Loop probe: what a worker's event loops do, counted (``benchmarks/loop_probe/report.py`` reads it).

Loaded by every Python process started with ``PYTHONPATH=benchmarks/loop_probe`` and active only
when ``LOOP_PROBE`` names an output prefix: the process then appends its cumulative counters as a
JSON line to ``$LOOP_PROBE.<pid>`` once a second, with each of its threads' CPU ticks. Counted, per
thread (``main``: the event loop's; ``other``: Faust's consumer thread and any other): event-loop
iterations, selector wake-ups (I/O or timeout), callbacks run (by callback or task coroutine),
timers scheduled (by their first caller outside asyncio and mode), thread-safe callbacks, Kafka
requests (by type) and aiokafka's fetched records. The wrappers cost CPU themselves: compare
counts, not the probed run's CPU.

    PYTHONPATH=benchmarks/loop_probe LOOP_PROBE=/tmp/probe \\
        .venv/bin/python -m benchmarks.bench_backlog --rate 500 --events 10000 --repeat 1
    .venv/bin/python -m benchmarks.loop_probe.report /tmp/probe.*
"""

from __future__ import annotations

import os

_OUT = os.environ.get("LOOP_PROBE")


def _install(out: str) -> None:
    import asyncio
    import asyncio.base_events as base_events
    import asyncio.events as events
    import collections
    import json
    import selectors
    import sys
    import threading
    import time
    from typing import Any

    counts: collections.Counter[str] = collections.Counter()

    def thread() -> str:
        return "main" if threading.current_thread() is threading.main_thread() else "other"

    run_once = base_events.BaseEventLoop._run_once  # type: ignore[attr-defined]

    def _run_once(self: Any) -> Any:
        counts["loop_iter." + thread()] += 1
        return run_once(self)

    base_events.BaseEventLoop._run_once = _run_once  # type: ignore[attr-defined]

    handle_run = events.Handle._run

    def _handle_run(self: Any) -> Any:
        callback = self._callback
        owner = getattr(callback, "__self__", None)
        if isinstance(owner, asyncio.Task):
            coro = owner.get_coro()
            name = "task:" + getattr(coro, "__qualname__", type(coro).__name__)
        else:
            name = getattr(callback, "__qualname__", type(callback).__name__)
        counts["handle." + thread() + "." + name] += 1
        return handle_run(self)

    events.Handle._run = _handle_run  # type: ignore[method-assign]

    select = selectors.EpollSelector.select

    def _select(self: Any, timeout: float | None = None) -> Any:
        ready = select(self, timeout)
        name = thread()
        counts["select." + name] += 1
        if ready:
            counts["select_io." + name] += 1
        elif timeout is None or timeout > 0:
            counts["select_timeout." + name] += 1
        return ready

    selectors.EpollSelector.select = _select  # type: ignore[method-assign]

    threadsafe = base_events.BaseEventLoop.call_soon_threadsafe

    def _threadsafe(self: Any, callback: Any, *args: Any, **kwargs: Any) -> Any:
        counts["threadsafe_from." + thread()] += 1
        return threadsafe(self, callback, *args, **kwargs)

    base_events.BaseEventLoop.call_soon_threadsafe = _threadsafe  # type: ignore[method-assign]

    call_at = base_events.BaseEventLoop.call_at
    skip = ("/asyncio/", "/mode/utils/", "loop_probe")

    def _call_at(self: Any, when: float, callback: Any, *args: Any, **kwargs: Any) -> Any:
        frame: Any = sys._getframe(1)
        where = "?"
        for _ in range(12):
            if frame is None:
                break
            filename = frame.f_code.co_filename
            if not any(s in filename for s in skip):
                where = f"{filename.rsplit('site-packages/', 1)[-1]}:{frame.f_code.co_name}"
                break
            frame = frame.f_back
        counts["timer." + thread() + "." + where] += 1
        return call_at(self, when, callback, *args, **kwargs)

    base_events.BaseEventLoop.call_at = _call_at  # type: ignore[method-assign]

    try:
        import aiokafka.client as kafka_client
        from aiokafka.consumer import fetcher as kafka_fetcher
    except ImportError:  # not a Kafka client: loop counts only
        pass
    else:
        send = kafka_client.AIOKafkaClient.send

        async def _send(self: Any, node_id: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
            counts["req." + type(request).__name__.split("_v")[0] + "." + thread()] += 1
            return await send(self, node_id, request, *args, **kwargs)

        kafka_client.AIOKafkaClient.send = _send  # type: ignore[method-assign]
        fetched = kafka_fetcher.Fetcher.fetched_records

        async def _fetched(self: Any, *args: Any, **kwargs: Any) -> Any:
            records = await fetched(self, *args, **kwargs)
            n = sum(len(v) for v in records.values())
            counts["fetched_records_calls"] += 1
            counts["fetched_records_msgs"] += n
            counts["fetched_records_nonempty"] += 1 if n else 0
            return records

        kafka_fetcher.Fetcher.fetched_records = _fetched  # type: ignore[method-assign]

    def dump() -> None:
        pid = os.getpid()
        while True:
            time.sleep(1.0)
            ticks: dict[str, int] = {}
            for task in os.listdir(f"/proc/{pid}/task"):
                try:
                    with open(f"/proc/{pid}/task/{task}/stat") as fh:
                        fields = fh.read().rsplit(")", 1)[1].split()
                except OSError:  # the thread ended meanwhile
                    continue
                ticks[task] = int(fields[11]) + int(fields[12])
            with open(f"{out}.{pid}", "a") as fh:
                fh.write(json.dumps({"t": time.time(), "c": dict(counts), "cpu_ticks": ticks, "main": pid}) + "\n")

    threading.Thread(target=dump, daemon=True, name="loop-probe").start()


if _OUT:
    _install(_OUT)
