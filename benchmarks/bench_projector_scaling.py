# ruff: noqa: E501
"""Projector scaling: N ``distill projector --no-index`` (or ``distill indexer``) processes in one group draining a backlog.

For each count in ``--projectors``: fresh topics (4 partitions) and a fresh keyspace; the
processes start and project a warm-up; they are paused (SIGSTOP), ``--events`` events of the
projection benchmark's mix (``bench_projections.make_events``: user and assistant turns, tool
calls, tool results up to 50 KB) are produced, and the processes are resumed (SIGCONT). The
clock runs from the resume until the group's stored offsets (``projector_offsets`` in
Cassandra: the truth the stage resumes from) reach the end of every partition. CPU is the
processes' user + system time and the Cassandra node's over the same stretch, per event.
Topics, consumer groups and the keyspace are deleted at the end of each run.

    .venv/bin/python benchmarks/bench_projector_scaling.py [--events 20000] [--projectors 1,2] [--stage critical|index] [--repeat 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_projections import make_events
from benchmarks.cpu_clock import find_cassandra_pid, process_cpu_s
from projections.cassandra_session import connect
from projections.migrations import apply_migrations
from schemas.settings import Settings, load_settings
from streams.clients.kafka_config import producer_kwargs
from streams.clients.topics_prune import delete_prefixed
from tests.integration.pipeline_support import DISTILL, ROOT, create_topics, scripted_pipeline_settings, worker_env

PARTITIONS = 4
WARM = 200


async def produce(settings: Settings, records: list[tuple[bytes, bytes]]) -> None:
    kwargs = producer_kwargs(settings.kafka)
    kwargs.update(linger_ms=5, max_batch_size=1024 * 1024)
    producer = AIOKafkaProducer(**kwargs)
    await producer.start()
    try:
        futures = [await producer.send(settings.topics.events, value, key=key) for key, value in records]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


def stored_offsets(session: Any, ks: str, group: str, topic: str) -> int:
    rows = session.execute(
        f"SELECT topic, next_offset FROM {ks}.projector_offsets WHERE consumer_group = %s", (group,), timeout=30
    )
    return sum(r.next_offset for r in rows if r.topic == topic)


async def wait_stored(session: Any, ks: str, group: str, topic: str, total: int, timeout: float) -> None:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if stored_offsets(session, ks, group, topic) >= total:
            return
        await asyncio.sleep(0.1)
    raise TimeoutError(
        f"group {group} stored {stored_offsets(session, ks, group, topic)} of {total} offsets in {timeout}s"
    )


def start_stage(settings: Settings, stage: str, group: str, log: Path) -> subprocess.Popen[bytes]:
    command = (
        [DISTILL, "projector", "--no-index", "--group", group]
        if stage == "critical"
        else [DISTILL, "indexer", "--group", group]
    )
    out = log.open("ab")
    return subprocess.Popen(command, env=worker_env(settings), stdout=out, stderr=subprocess.STDOUT, cwd=str(ROOT))


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGCONT)
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)


async def run(args: argparse.Namespace, count: int) -> dict[str, float]:
    settings = scripted_pipeline_settings(
        load_settings(), "http://127.0.0.1:9/v1", partitions=PARTITIONS, topic_prefix="bench"
    )
    settings.cassandra.keyspace = f"bench_scale_{uuid.uuid4().hex[:8]}"
    run_prefix = settings.topics.events.rsplit(".", 1)[0] + "."
    group = f"{settings.worker.app_id}-{'projector' if args.stage == 'critical' else 'indexer'}"
    cluster, session = connect(settings.cassandra)
    apply_migrations(session, settings.cassandra)
    await create_topics(settings)
    tmp = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    procs = [start_stage(settings, args.stage, group, tmp / f"stage-{i}.log") for i in range(count)]
    cassandra = find_cassandra_pid(settings.cassandra.port)
    try:
        source, _, _ = make_events(WARM + args.events, args.sessions)
        records = [(r.key or b"", r.value or b"") for r in source]
        await produce(settings, records[:WARM])
        await wait_stored(session, settings.cassandra.keyspace, group, settings.topics.events, WARM, 180)
        await asyncio.sleep(3)  # the warm-up's heartbeats and group joins are not the drain's
        for p in procs:
            os.kill(p.pid, signal.SIGSTOP)
        await produce(settings, records[WARM:])
        pids = [p.pid for p in procs]
        cpu0 = sum(map(process_cpu_s, pids))
        cass0 = process_cpu_s(cassandra) if cassandra else 0.0
        t0 = time.monotonic()
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
        await wait_stored(
            session, settings.cassandra.keyspace, group, settings.topics.events, len(records), args.timeout
        )
        seconds = time.monotonic() - t0
        cpu = sum(map(process_cpu_s, pids)) - cpu0
        cass = (process_cpu_s(cassandra) - cass0) if cassandra else float("nan")
        n = args.events
        return {"events_s": n / seconds, "drain_s": seconds, "stage_cpu_us": cpu / n * 1e6, "cassandra_cpu_us": cass / n * 1e6,
                "load": os.getloadavg()[0]}  # fmt: skip
    finally:
        stop(procs)
        session.execute(f"DROP KEYSPACE IF EXISTS {settings.cassandra.keyspace}", timeout=120)
        cluster.shutdown()
        await delete_prefixed(settings.kafka, [run_prefix, settings.worker.app_id])


def summary(rows: list[dict[str, float]], key: str) -> str:
    values = [r[key] for r in rows]
    return f"{min(values):,.0f} / {statistics.median(values):,.0f}"


async def main(args: argparse.Namespace) -> None:
    label = "projector --no-index (critical path)" if args.stage == "critical" else "indexer"
    for count in (int(c) for c in args.projectors.split(",")):
        rows = []
        for _ in range(args.repeat):
            rows.append(await run(args, count))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        print(f"{count} x {label}, {args.events:,} events of {args.sessions} sessions on {PARTITIONS} partitions: "
              f"{summary(rows, 'events_s')} events/s, drained in {summary(rows, 'drain_s')} s, "
              f"CPU {summary(rows, 'stage_cpu_us')} µs/event in the stage + {summary(rows, 'cassandra_cpu_us')} in Cassandra "
              f"(min / median of {len(rows)}; load average {rows[-1]['load']:.1f})", flush=True)  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--projectors", default="1,2", help="processes in the group (comma list)")
    parser.add_argument("--stage", choices=("critical", "index"), default="critical")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=600.0)
    asyncio.run(main(parser.parse_args()))
