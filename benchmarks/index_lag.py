"""The lag of each stage at a sustained rate: ``distill projector --no-index``, ``distill indexer`` and
``distill indexer --deep`` (the later chunks of long documents) as processes.

Used by ``bench_projections`` (step 4). Per-run names (``bench-<hex>`` topics
and consumer groups, a ``bench_lag_<hex>`` keyspace), all deleted at the end.
An event's lag in a stage is the time from its send to the first poll (every
``poll_s``) that finds the stage's stored offset (``projector_offsets``,
written after the rows) past it: the time until its rows are readable. A
stage's lag is *growing* when it rises by more than 0.05 s per second sent
(least squares over the phase: the stage does not keep up with the rate),
else *bounded*; the slope is printed. Its events/s
is how many events it had indexed by the time it caught up (or the phase's
drain ended), over that time.
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from aiokafka import AIOKafkaProducer

from benchmarks.cpu_clock import process_cpu_s
from projections.cassandra_session import aexecute, connect
from projections.migrations import apply_migrations
from projections.read_api import SessionReader
from schemas import SessionKey
from schemas.settings import Settings
from streams.clients.kafka_config import producer_kwargs
from streams.clients.topics_admin import ensure_topics
from streams.clients.topics_prune import delete_prefixed

Search = Callable[[SessionReader, list[SessionKey], random.Random, int], Awaitable[tuple[str, float]]]
"""One timed search: (reader, sessions, rng, i) → (scope, milliseconds); see ``bench_projections.timed_search``."""


def _pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))] if values else float("nan")


def _env(settings: Settings) -> dict[str, str]:
    env = dict(os.environ)
    env["DISTILL_CASSANDRA__KEYSPACE"] = settings.cassandra.keyspace
    for name in ("events", "jobs", "summaries", "dead_letters"):
        env[f"DISTILL_TOPICS__{name.upper()}"] = getattr(settings.topics, name)
    env["DISTILL_TOPICS__PARTITIONS"] = str(settings.topics.partitions)
    env["DISTILL_WORKER__APP_ID"] = settings.worker.app_id
    env["DISTILL_WORKER__LOG_LEVEL"] = "WARNING"
    env["DISTILL_INDEX__PRIMARY_CHUNKS"] = str(settings.index.primary_chunks)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")]))
    return env


def trend(sent_lags: list[tuple[float, float]], missing: int) -> str:
    """``growing``/``bounded`` and the lag's slope over the phase (seconds of lag per second sent, least squares
    over ``(sent at, lag)`` pairs): growing above 0.05 (the stage falls behind by 5% of the rate), or when events
    never caught up."""
    if len(sent_lags) < 2:
        return "growing" if missing else "bounded"
    n = len(sent_lags)
    mx = sum(at for at, _ in sent_lags) / n
    my = sum(lag for _, lag in sent_lags) / n
    var = sum((at - mx) ** 2 for at, _ in sent_lags)
    slope = sum((at - mx) * (lag - my) for at, lag in sent_lags) / var if var else 0.0
    return f"{'growing' if missing or slope > 0.05 else 'bounded'} ({slope:+.2f} s/s)"


async def measure_lag(
    base: Settings, make_events: Callable[..., Any], *, rate: float, seconds: float, sessions: int,
    poll_s: float = 0.02, drain_timeout_s: float = 180.0, with_indexer: bool = True,
    search: Search | None = None, search_rate: float = 0.0, cassandra_pid: int | None = None,
    alter: Sequence[str] = (), deep: bool = True,
) -> None:  # fmt: skip
    """Produce ``rate * seconds`` events of the benchmark mix at ``rate``/s; print each stage's lag p50/p99/max.

    ``with_indexer=False``: the projector alone (what the indexer's load on Cassandra costs the critical path).
    ``search`` (with ``search_rate`` > 0): that many ``session_search`` calls a second, one at a time, while
    the events are produced, over the sessions written so far; their p50/p99 is printed (search under ingest,
    against an index that compacts as it grows). ``cassandra_pid``: Cassandra's CPU over the phase is printed
    per event (every stage, the searches and whatever else that node serves meanwhile). ``alter``: CQL run
    after the migrations (``{ks}`` = the phase's keyspace), as ``bench_projections --alter``. ``deep=False``:
    no deep stage (the indexer's later chunks are then never written: the primary stage alone).
    """
    run = uuid.uuid4().hex[:8]
    prefix = f"bench-{run}"
    data = base.model_dump()
    data["cassandra"]["keyspace"] = f"bench_lag_{run}"
    for name in ("events", "jobs", "summaries", "dead_letters"):
        data["topics"][name] = f"{prefix}.{name}"
    data["worker"]["app_id"] = prefix
    settings = Settings(**data)
    groups = {"critical path": f"{prefix}-projector", "indexer": f"{prefix}-indexer",
              "deep index": f"{prefix}-indexer-deep"}  # fmt: skip
    if not with_indexer:
        del groups["indexer"]
    if not (with_indexer and deep):
        del groups["deep index"]
    cluster, session = connect(settings.cassandra)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        apply_migrations(session, settings.cassandra)
        for cql in alter:
            session.execute(cql.replace("{ks}", settings.cassandra.keyspace), timeout=60)
        await ensure_topics(settings)
        exe = [sys.executable, "-c", "from streams.cli.main import main; main()"]
        procs.append(subprocess.Popen([*exe, "projector", "--no-index", "--group", groups["critical path"]],
                                      env=_env(settings)))  # fmt: skip
        if with_indexer:
            procs.append(subprocess.Popen([*exe, "indexer", "--group", groups["indexer"]], env=_env(settings)))
        if "deep index" in groups:
            procs.append(subprocess.Popen([*exe, "indexer", "--deep", "--group", groups["indexer"]],
                                          env=_env(settings)))  # fmt: skip
        ks = settings.cassandra.keyspace
        progress = session.prepare(f"SELECT consumer_group FROM {ks}.projector_progress WHERE topic = ? "
                                   "AND partition = ?")  # fmt: skip
        offsets = session.prepare(f"SELECT partition, next_offset FROM {ks}.projector_offsets WHERE "
                                  "consumer_group = ? AND topic = ?")  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # both stages hold partitions once their heartbeats appear
            seen = {r.consumer_group for p in range(settings.topics.partitions)
                    for r in session.execute(progress, (settings.topics.events, p))}  # fmt: skip
            if set(groups.values()) <= seen:
                break
            if any(p.poll() is not None for p in procs):
                raise RuntimeError("a stage exited before it was assigned its partitions")
            await asyncio.sleep(0.25)
        else:
            raise RuntimeError("the stages were not assigned their partitions within 60 s")

        total = int(rate * seconds)
        records, keys, _ = make_events(total, sessions, seed=11)
        sent: dict[tuple[int, int], float] = {}
        lags: dict[str, list[float]] = {name: [] for name in groups}
        sent_lags: dict[str, list[tuple[float, float]]] = {name: [] for name in groups}
        last_done: dict[str, float] = {}
        pending = {name: {} for name in groups}  # type: dict[str, dict[tuple[int, int], float]]
        next_seen = {name: {} for name in groups}  # type: dict[str, dict[int, int]]
        cpu0 = {p.pid: process_cpu_s(p.pid) for p in procs}
        cassandra0 = process_cpu_s(cassandra_pid) if cassandra_pid else 0.0

        def delivered(at: float, future: asyncio.Future[Any]) -> None:
            if future.exception() is None:
                md = future.result()
                sent[(md.partition, md.offset)] = at
                for name in groups:
                    pending[name][(md.partition, md.offset)] = at

        async def produce() -> None:
            producer = AIOKafkaProducer(**{**producer_kwargs(settings.kafka), "linger_ms": 2})
            await producer.start()
            try:
                start = time.monotonic()
                futures = []
                for i, r in enumerate(records):
                    delay = start + i / rate - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    at = time.time()
                    future = await producer.send(settings.topics.events, r.value, key=r.key)
                    future.add_done_callback(functools.partial(delivered, at))
                    futures.append(future)
                await asyncio.gather(*futures)
                produced_s.append(time.monotonic() - start)
                if cassandra_pid:
                    produced_cpu.append(process_cpu_s(cassandra_pid) - cassandra0)
            finally:
                await producer.stop()

        async def poll() -> None:
            pages = await asyncio.gather(*(aexecute(session, offsets, (group, settings.topics.events))
                                           for group in groups.values()))  # fmt: skip
            now = time.time()
            for name, rows in zip(groups, pages, strict=True):
                for row in rows:
                    next_seen[name][row.partition] = row.next_offset
                done = [tp for tp in pending[name] if tp[1] < next_seen[name].get(tp[0], 0)]
                for tp in done:
                    at = pending[name].pop(tp)
                    lags[name].append(now - at)
                    sent_lags[name].append((at, now - at))
                if done:
                    last_done[name] = now

        searched: list[tuple[str, float]] = []
        produced_s: list[float] = []
        produced_cpu: list[float] = []

        async def search_loop() -> None:
            assert search is not None
            reader, rng, i = SessionReader(session, ks), random.Random(13), 0
            warm = min(5.0, seconds / 4)  # every session has events by then
            start = time.monotonic() + warm
            await asyncio.sleep(warm)
            while not producing.done():
                searched.append(await search(reader, keys, rng, i))
                i += 1
                delay = start + i / search_rate - time.monotonic()
                await asyncio.sleep(max(0.0, delay))

        producing = asyncio.ensure_future(produce())
        searching = asyncio.ensure_future(search_loop()) if search is not None and search_rate > 0 else None
        started, started_at = time.monotonic(), time.time()
        while not producing.done() or any(pending.values()):
            await poll()
            if producing.done() and time.monotonic() - started > seconds + drain_timeout_s:
                break
            await asyncio.sleep(poll_s)
        await producing
        if searching is not None:
            await searching
        wall = time.monotonic() - started
        cassandra_cpu = process_cpu_s(cassandra_pid) - cassandra0 if cassandra_pid else None
        alone = "" if with_indexer else ", the projector alone"
        sent_rate = total / produced_s[0]
        print(f"sustained {rate:,.0f} events/s for {seconds:.0f}s ({total} events, Kafka + processes{alone}, "
              f"offsets polled every {poll_s * 1000:.0f} ms; sent at {sent_rate:,.0f} events/s):")  # fmt: skip
        for (name, values), proc in zip(lags.items(), procs, strict=True):
            cpu = process_cpu_s(proc.pid) - cpu0[proc.pid]
            missing = len(pending[name])
            rate_done = len(values) / max(1e-9, last_done.get(name, started_at) - started_at)
            print(f"  {name:13s} lag p50 {_pct(values, 50) * 1000:7.0f} ms  p99 {_pct(values, 99) * 1000:7.0f} ms  "
                  f"max {max(values, default=float('nan')) * 1000:7.0f} ms  {trend(sent_lags[name], missing)}  "
                  f"{rate_done:,.0f} events/s  cpu {cpu / total * 1e6:.0f} µs/event"
                  + (f"  ({missing} never caught up)" if missing else ""))  # fmt: skip
        if searched:
            ms = [v for _, v in searched]
            print(f"  session_search meanwhile: p50 {_pct(ms, 50):.1f} ms  p99 {_pct(ms, 99):.1f} ms  "
                  f"max {max(ms):.1f} ms ({len(ms)} searches, one at a time, ~{search_rate:g}/s)")  # fmt: skip
        if cassandra_cpu is not None:
            print(f"  cassandra cpu {cassandra_cpu / total * 1e6:.0f} µs/event (pid {cassandra_pid}, the whole phase); "
                  f"{produced_cpu[0] / produced_s[0]:.2f} cores while sending")  # fmt: skip
        print(f"  wall {wall:.1f}s; load avg {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        session.execute(f"DROP KEYSPACE IF EXISTS {settings.cassandra.keyspace}", timeout=120)
        cluster.shutdown()
        await delete_prefixed(settings.kafka, [f"{prefix}.", f"{prefix}-"])
