"""Projector and indexer throughput, index lag and read latency on the local services (loopback, bounded).

    .venv/bin/python benchmarks/bench_projections.py [--events 100000] [--sessions 200] [--stages both]
                                                     [--lag-seconds 30 --lag-rate 1000]

Builds a fresh keyspace and, for ``--events`` realistic events:

1. **critical path**: ``Projector.project`` alone (events, event ids, turns,
   tool calls/results, sources, offsets: what the next prompt needs), timed,
   with its CPU and Cassandra's per event;
2. **indexer**: ``RecallIndexer.project`` alone over the same records (the
   ``session_search`` index: documents, chunks, SAI token postings), timed:
   its primary stage, then its deep stage (the later chunks of long documents
   beyond ``--primary-chunks``), each with its CPU and Cassandra's per event;
3. summaries, then ``session_search`` and ``session_load`` latency (p50/p99);
4. **index lag at a sustained rate** (``--lag-seconds`` > 0): a per-run set of
   topics on the local Kafka, ``distill projector --no-index``,
   ``distill indexer`` and ``distill indexer --deep`` as processes, the same
   event mix produced at ``--lag-rate`` events/s; the lag of an event is the
   time from its send to the moment its stage's stored offset
   (``projector_offsets``, polled every 20 ms) passes it. p50/p99/max for
   each stage, whether it grows, each stage's events/s and CPU per event. Meanwhile ``session_search``
   runs one call at a time at ``--lag-search-rate`` calls/s (default 10) over
   the growing keyspace: search latency under ingest. The topics and groups
   are deleted afterwards.

Kafka is not in the measured path of 1-3 (the Cassandra write side); the
keyspace is dropped at the end. ``--stages critical`` / ``index`` runs only
that stage in step 1-2. ``--no-deep``: no deep stage (its chunks are never
indexed); ``--primary-chunks 1000 --no-deep``: one stage writing everything,
the indexer as it was before the deep stage. Event mix: 45% user (40-400 chars), 35% assistant
(200-2000 chars), 10% assistant tool calls, 10% tool results of which a
quarter are 50 KB.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from benchmarks.cpu_clock import CpuMeter, find_cassandra_pid
from projections.cassandra_session import connect
from projections.indexer import RecallIndexer
from projections.migrations import apply_migrations
from projections.projector import Projector, SourceRecord
from projections.read_api import SessionReader
from schemas import DeadLetter, SessionKey
from schemas.settings import load_settings

WORDS = [
    "deploy",
    "kubernetes",
    "cluster",
    "invoice",
    "billing",
    "database",
    "postgres",
    "migration",
    "schema",
    "latency",
    "cache",
    "redis",
    "queue",
    "kafka",
    "consumer",
    "offset",
    "retry",
    "timeout",
    "token",
    "summary",
    "budget",
    "report",
    "customer",
    "order",
    "refund",
    "shipping",
    "address",
    "weather",
    "forecast",
    "flight",
    "hotel",
    "booking",
    "payment",
    "card",
    "error",
    "stack",
    "trace",
    "python",
    "function",
    "test",
    "coverage",
]


def _text(rng: random.Random, chars: int) -> str:
    out: list[str] = []
    n = 0
    while n < chars:
        w = rng.choice(WORDS) if rng.random() < 0.6 else f"w{rng.randrange(50_000)}"
        out.append(w)
        n += len(w) + 1
    return " ".join(out)[:chars]


def make_events(n: int, sessions: int, seed: int = 7) -> tuple[list[SourceRecord], list[SessionKey], list[str]]:
    rng = random.Random(seed)
    keys = [SessionKey("bench", f"user{i % 20}", f"s{i}") for i in range(sessions)]
    t0 = datetime(2025, 1, 1, tzinfo=UTC)
    records: list[SourceRecord] = []
    call_ids: list[str] = []
    pending: dict[SessionKey, str] = {}
    for i in range(n):
        key = keys[i % sessions]
        base = {"app_name": key.app_name, "user_id": key.user_id, "session_id": key.session_id,
                "event_id": f"e{i}", "timestamp": (t0 + timedelta(milliseconds=i * 10)).isoformat(),
                "author": "agent"}  # fmt: skip
        r = rng.random()
        if key in pending:
            call_id = pending.pop(key)
            size = 50_000 if rng.random() < 0.25 else rng.randrange(200, 4000)
            msg: dict[str, Any] = {"role": "tool", "content": _text(rng, size), "tool_call_id": call_id, "name": "t"}
            call_ids.append(f"{key.session_id}|{call_id}")
        elif r < 0.45:
            msg = {"role": "user", "content": _text(rng, rng.randrange(40, 400))}
            base["author"] = "user"
        elif r < 0.8:
            msg = {"role": "assistant", "content": _text(rng, rng.randrange(200, 2000))}
        else:
            call_id = f"c{i}"
            pending[key] = call_id
            msg = {"role": "assistant", "content": None, "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": "t", "arguments": '{"q": "x"}'}}]}  # fmt: skip
        base["message"] = msg
        records.append(SourceRecord("events", 0, i, key.kafka_key(), json.dumps(base).encode(), 0))
    return records, keys, call_ids


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))]


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=100_000)  # needs a Cassandra heap > 1 GB: see the report
    ap.add_argument("--sessions", type=int, default=200)
    ap.add_argument("--batch", type=int, default=2000, help="records per project() call (the runner polls up to 2000)")
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument(
        "--stages",
        choices=("both", "critical", "index"),
        default="both",
        help="which stages to measure in steps 1-2 (search needs the index, load the critical path)",
    )
    ap.add_argument("--time-budget", type=float, default=240.0, help="stop a stage after this many seconds")
    ap.add_argument("--lag-seconds", type=float, default=30.0, help="sustained-rate phase length (0: skip it)")
    ap.add_argument("--lag-rate", default="1000", help="events/s in the sustained-rate phase (a comma list: each)")
    ap.add_argument("--lag-alone", action="store_true", help="each rate again with the projector alone")
    ap.add_argument("--lag-search-rate", type=float, default=10.0,
                    help="session_search calls/s during the sustained-rate phase (0: none)")  # fmt: skip
    ap.add_argument("--keep", action="store_true", help="keep the keyspace (for --reuse); drop it yourself")
    ap.add_argument("--reuse", metavar="KEYSPACE", help="skip projecting: measure reads on a kept keyspace")
    ap.add_argument("--alter", action="append", default=[], metavar="CQL",
                    help="run after the migrations (the lag phase's too), {ks} = the keyspace (e.g. table "
                         "options to compare)")  # fmt: skip
    ap.add_argument("--settle", action="store_true",
                    help="wait for the compaction backlog after projecting (its CPU counted), then read")  # fmt: skip
    ap.add_argument("--cassandra-pid", type=int, help="for CPU accounting (default: the local node on the port)")
    ap.add_argument("--primary-chunks", type=int, default=None,
                    help="later chunks per document on the indexer's primary stage (default: the setting)")  # fmt: skip
    ap.add_argument("--no-deep", action="store_true", help="no deep index stage (steps 2 and 4)")
    args = ap.parse_args()
    settings = load_settings()
    if args.primary_chunks is not None:
        settings.index.primary_chunks = args.primary_chunks
    settings.cassandra.keyspace = args.reuse or f"bench_{uuid.uuid4().hex[:8]}"
    cluster, session = connect(settings.cassandra)
    ks = settings.cassandra.keyspace
    if not args.reuse:
        apply_migrations(session, settings.cassandra)
        for cql in args.alter:
            session.execute(cql.replace("{ks}", ks), timeout=60)
    try:
        records, keys, call_ids = make_events(args.events, args.sessions)
        cassandra_pid = args.cassandra_pid or find_cassandra_pid(settings.cassandra.port)
        if args.reuse:
            await measure_reads(session, ks, keys, call_ids, args.events, args.queries, cassandra_pid)
            return
        total_bytes = sum(len(r.value or b"") for r in records)
        print(f"{len(records)} events, {total_bytes / 1e6:.1f} MB JSON, {args.sessions} sessions; "
              f"load avg before {' '.join(f'{x:.2f}' for x in os.getloadavg())}")  # fmt: skip
        projector = Projector(session, ks, events_topic="events", summaries_topic="summaries", consumer_group="b",
                              concurrency=args.concurrency)  # fmt: skip
        indexer = RecallIndexer(session, ks, events_topic="events", consumer_group="b-index", scope="primary",
                                concurrency=args.concurrency, primary_chunks=settings.index.primary_chunks)  # fmt: skip
        deep = RecallIndexer(session, ks, events_topic="events", consumer_group="b-index-deep", scope="deep",
                             concurrency=args.concurrency, primary_chunks=settings.index.primary_chunks)  # fmt: skip
        done = len(records)
        if args.stages in ("both", "critical"):
            done = await run_stage("critical path", projector, records, args, cassandra_pid, total_bytes)
        if args.stages in ("both", "index"):
            print(f"indexer: primary stage with the first {settings.index.primary_chunks} later chunks of a document")
            done = await run_stage("indexer", indexer, records[:done], args, cassandra_pid, total_bytes)
            print(f"indexer: {indexer.indexed_tokens / max(1, done):.1f} index tokens (SAI postings) per event")
            if not args.no_deep:
                done = await run_stage("deep index", deep, records[:done], args, cassandra_pid, total_bytes)
                print(f"deep index: {deep.indexed_tokens / max(1, done):.1f} index tokens (SAI postings) per event")
        print(f"keyspace {ks}") if args.keep else None
        if args.settle:
            meter = CpuMeter(cassandra_pid)
            meter.start()
            waited = await settle_compactions(session)
            print(f"compaction backlog ({waited:.0f}s): {meter.report(done)}")
        if args.stages != "index":
            await write_summaries(projector, session, ks, keys)
        await measure_reads(session, ks, keys, call_ids, done, args.queries, cassandra_pid,
                            search=args.stages != "critical", load=args.stages != "index")  # fmt: skip
    finally:
        if not (args.keep or args.reuse):
            session.execute(f"DROP KEYSPACE IF EXISTS {ks}", timeout=120)
        cluster.shutdown()
    if args.lag_seconds > 0 and not args.reuse:
        from benchmarks.index_lag import measure_lag

        for rate in (float(r) for r in str(args.lag_rate).split(",")):
            await measure_lag(settings, make_events, rate=rate, seconds=args.lag_seconds, sessions=args.sessions,
                              search=timed_search, search_rate=args.lag_search_rate,
                              cassandra_pid=cassandra_pid, alter=args.alter, deep=not args.no_deep)  # fmt: skip
            if args.lag_alone:
                await measure_lag(settings, make_events, rate=rate, seconds=args.lag_seconds, sessions=args.sessions,
                                  with_indexer=False, cassandra_pid=cassandra_pid, alter=args.alter)  # fmt: skip


async def run_stage(
    name: str, stage: Projector | RecallIndexer, records: list[SourceRecord], args: argparse.Namespace,
    cassandra_pid: int | None, total_bytes: int,
) -> int:  # fmt: skip
    """Apply ``records`` through ``stage`` in batches of ``--batch``, print events/s and CPU; returns the count."""

    async def sink(_: DeadLetter) -> None:
        raise AssertionError("no dead letters expected")

    meter = CpuMeter(cassandra_pid)
    meter.start()
    t = time.perf_counter()
    done = 0
    for i in range(0, len(records), args.batch):
        await stage.project(records[i : i + args.batch], sink)
        done = min(len(records), i + args.batch)
        if time.perf_counter() - t > args.time_budget:
            break
    took = time.perf_counter() - t
    mb = total_bytes * done / len(records) / 1e6
    print(f"{name}: {done} events ({mb:.1f} MB JSON) in {took:.1f}s: {done / took:,.0f} events/s, "
          f"{mb / took:.1f} MB/s")  # fmt: skip
    print(f"  {meter.report(done)}")
    return done


async def settle_compactions(session: Any, quiet_s: float = 5.0, limit_s: float = 300.0) -> float:
    """Wait until no compaction has run or waited for ``quiet_s`` (at most ``limit_s``); returns the wait."""
    t = time.perf_counter()
    quiet_since = t
    while time.perf_counter() - t < limit_s:
        row = session.execute("SELECT active_tasks, pending_tasks FROM system_views.thread_pools "
                              "WHERE name = 'CompactionExecutor'").one()  # fmt: skip
        if row.active_tasks or row.pending_tasks:
            quiet_since = time.perf_counter()
        elif time.perf_counter() - quiet_since >= quiet_s:
            break
        await asyncio.sleep(0.5)
    return time.perf_counter() - t


async def write_summaries(projector: Projector, session: Any, ks: str, keys: list[SessionKey]) -> None:
    async def sink(_: DeadLetter) -> None:
        raise AssertionError("no dead letters expected")

    # Every session gets a summary halfway, so current_hidden has something to search.
    summaries: list[SourceRecord] = []
    for key in keys:
        rows = list(session.execute(
            f"SELECT ts, event_id FROM {ks}.events_by_session WHERE app_name=%s AND user_id=%s AND session_id=%s "
            "LIMIT 250", tuple(key)))  # fmt: skip
        if rows:
            mid = rows[len(rows) // 2]
            summ = {"app_name": key.app_name, "user_id": key.user_id, "session_id": key.session_id,
                    "summary": "s", "version": 1, "boundary": {"cutoff_at": mid.ts.isoformat() + "Z",
                    "last_event_id": mid.event_id}, "model": "m", "prompt_version": "p",
                    "created_at": datetime.now(UTC).isoformat(), "report": {"trigger": {"name": "manual"}},
                    "job_id": "j"}  # fmt: skip
            summaries.append(SourceRecord("summaries", 0, len(summaries), None, json.dumps(summ).encode()))
    await projector.project(summaries, sink)


async def measure_reads(
    session: Any, ks: str, keys: list[SessionKey], call_ids: list[str], done: int, n_queries: int,
    cassandra_pid: int | None = None, *, search: bool = True, load: bool = True,
) -> None:  # fmt: skip
    if n_queries <= 0:  # --queries 0: writes only
        return
    reader = SessionReader(session, ks)
    meter = CpuMeter(cassandra_pid)
    meter.start()
    if search:
        await measure_search(reader, keys, done, n_queries, meter)
    if load:
        await measure_load(reader, keys, call_ids, done, n_queries, cassandra_pid)


SEARCH_QUERIES = ("kubernetes deploy", "invoice billing refund", "what did we decide about the cache, and the "
                  "kafka consumer offset?", "postgres migration schema", "flight hotel booking")  # fmt: skip
SEARCH_SCOPES = ("current_session", "current_hidden", "other_sessions", "all_sessions")


async def timed_search(reader: SessionReader, keys: list[SessionKey], rng: random.Random, i: int) -> tuple[str, float]:
    """Search ``i`` of the benchmark's rotation (scope by ``i``, session and query by ``rng``): (scope, ms)."""
    key = rng.choice(keys)
    scope = SEARCH_SCOPES[i % len(SEARCH_SCOPES)]
    t = time.perf_counter()
    await reader.session_search(key, rng.choice(SEARCH_QUERIES), scope, 5)
    return scope, (time.perf_counter() - t) * 1000


async def measure_search(reader: SessionReader, keys: list[SessionKey], done: int, n_queries: int, meter: CpuMeter
                         ) -> None:  # fmt: skip
    rng = random.Random(3)
    search_ms: dict[str, list[float]] = {s: [] for s in SEARCH_SCOPES}
    searched = keys[: min(len(keys), max(1, done // 500))]
    for i in range(n_queries):
        scope, ms = await timed_search(reader, searched, rng, i)
        search_ms[scope].append(ms)
    all_search = [v for vs in search_ms.values() for v in vs]
    print(f"session_search: p50 {pct(all_search, 50):.1f} ms, p99 {pct(all_search, 99):.1f} ms "
          f"({len(all_search)} queries)")  # fmt: skip
    for scope, vs in search_ms.items():
        print(f"  {scope:16s} p50 {pct(vs, 50):.1f} ms  p99 {pct(vs, 99):.1f} ms")
    print(f"  {meter.report(n_queries, 'search')}")


async def measure_load(reader: SessionReader, keys: list[SessionKey], call_ids: list[str], done: int, n_queries: int,
                       cassandra_pid: int | None) -> None:  # fmt: skip
    rng = random.Random(5)
    meter = CpuMeter(cassandra_pid)
    meter.start()
    load_ms: list[float] = []
    loadable = call_ids[: max(1, done // 10)]
    for _ in range(n_queries):
        sid, call = rng.choice(loadable).split("|")
        key = next(k for k in keys if k.session_id == sid)
        t = time.perf_counter()
        await reader.session_load(key, tool_call_id=call, before=1, after=1)
        load_ms.append((time.perf_counter() - t) * 1000)
    print(f"session_load:   p50 {pct(load_ms, 50):.1f} ms, p99 {pct(load_ms, 99):.1f} ms, "
          f"mean {statistics.mean(load_ms):.1f} ms ({len(load_ms)} loads)")  # fmt: skip
    print(f"  {meter.report(n_queries, 'load')}")


if __name__ == "__main__":
    asyncio.run(main())
