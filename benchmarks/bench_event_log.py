# ruff: noqa: E501
"""A job's delta read when it is no longer in the worker's record buffer (DISTILL_WORKER__RECENT_EVENTS_MB), by number of interleaved sessions.

For each ``--sessions`` count, ``--per-session`` events of every session are written
interleaved on one partition (event n of every session, then n + 1). The reader reads
whole sessions' deltas (first to last event) as the summarize agent does after the
values fell out of :class:`RecentEvents`: with the per-key offset index (what the track
agent records) and, for comparison, by the scan of the stretch (no index: a worker
restarted since). Prints ms and CPU ms per job and records read per job; the topic is
deleted afterwards.

    .venv/bin/python benchmarks/bench_event_log.py [--sessions 100,1000,10000] [--per-session 20]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from pathlib import Path

from aiokafka import AIOKafkaProducer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from schemas.settings import load_settings
from streams.app.event_log import EventLogReader, RecentEvents
from streams.clients.kafka_config import producer_kwargs
from streams.clients.topics_admin import ensure_topics
from streams.clients.topics_prune import delete_prefixed


async def write(settings, sessions: int, per_session: int) -> list[tuple[int, bytes, bytes]]:
    kwargs = producer_kwargs(settings.kafka)
    kwargs.update(linger_ms=5, max_batch_size=256 * 1024)
    producer = AIOKafkaProducer(**kwargs)
    await producer.start()
    try:
        pending = []
        for n in range(per_session):
            for s in range(sessions):
                key = f"b/u/s{s}".encode()
                value = (
                    f'{{"session_id":"s{s}","event_id":"e{n}","text":"message {n} of s{s}: ' + "x" * 180 + '"}'
                ).encode()
                pending.append((key, value, await producer.send(settings.topics.events, value, key=key, partition=0)))
        return [((await f).offset, k, v) for k, v, f in pending]
    finally:
        await producer.stop()


async def jobs(
    reader: EventLogReader, written: list[tuple[int, bytes, bytes]], keys: list[bytes]
) -> tuple[list[float], list[float], float]:
    first, last = written[0][0], written[-1][0]
    wall, cpu = [], []
    scanned0 = reader.records_scanned
    for key in keys:
        t0, c0 = time.perf_counter(), time.process_time()
        found = await reader.read(0, first, last, key)
        wall.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
        assert found and all(e.value for e in found)
    return wall, cpu, (reader.records_scanned - scanned0) / len(keys)


async def main(args: argparse.Namespace) -> None:
    base = load_settings()
    prefix = f"bench-{uuid.uuid4().hex[:8]}."
    try:
        for sessions in (int(s) for s in args.sessions.split(",")):
            data = base.model_dump()
            for name in ("events", "jobs", "summaries", "dead_letters"):
                data["topics"][name] = f"{prefix}{sessions}.{name}"
            data["topics"]["partitions"] = 1
            settings = type(base)(**data)
            await ensure_topics(settings)
            written = await write(settings, sessions, args.per_session)
            keys = [f"b/u/s{s}".encode() for s in range(0, sessions, max(1, sessions // args.jobs))][: args.jobs]
            indexed = EventLogReader(settings.kafka, settings.topics.events)
            indexed.recent = RecentEvents(max_bytes=0)  # the values fell out; the offsets are known
            for offset, key, value in written:
                indexed.recent.add(0, offset, key, value)
            scanning = EventLogReader(settings.kafka, settings.topics.events)
            try:
                await jobs(indexed, written, keys[:1])  # connect
                wall, cpu, per_job = await jobs(indexed, written, keys)
                swall, scpu, sper_job = await jobs(scanning, written, keys[: args.scan_jobs])
            finally:
                await indexed.stop()
                await scanning.stop()
            print(f"{sessions:>6,} sessions x {args.per_session} ({len(written):,} records): "
                  f"by offsets {statistics.median(wall):6.1f} ms / CPU {statistics.median(cpu):6.1f} ms per job, {per_job:,.0f} records read; "
                  f"scan {statistics.median(swall):7.1f} ms / CPU {statistics.median(scpu):7.1f} ms, {sper_job:,.0f} records read (median of {len(wall)} / {len(swall)} jobs)", flush=True)  # fmt: skip
    finally:
        await delete_prefixed(base.kafka, [prefix])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", default="100,1000,10000")
    parser.add_argument("--per-session", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--scan-jobs", type=int, default=3)
    asyncio.run(main(parser.parse_args()))
