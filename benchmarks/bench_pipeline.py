# ruff: noqa: E501
"""Pipeline benchmark: one ``distill worker`` on the local Kafka, a zero-latency OpenAI-compatible endpoint.

Prints: sustained ingest events/s through the track agent, event→job p50/p99
(paced load), job→summary p50/p99 (zero-latency LLM), and worker RSS with
``--sessions`` sessions tracked; also the track table's changelog records per
ingested event (below 1 when writes to a key coalesce within a batch) and the
load average before/after (the numbers are CPU-bound: other processes on the
machine move them). Loopback only; bounded time.

    .venv/bin/python benchmarks/bench_pipeline.py [--events 60000] [--sessions 100000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import GroupCoordinatorNotAvailableError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.worker_knobs import add_worker_knobs, apply_worker_knobs
from schemas.settings import Settings, load_settings
from streams.clients.kafka_config import common_kwargs, producer_kwargs
from streams.clients.topics_prune import delete_prefixed
from tests.integration.pipeline_support import (
    WorkerProcess,
    create_topics,
    read_topic,
    scripted_pipeline_settings,
)
from tests.support.openai_server import OpenAIServer


def event_bytes(app: str, session: str, n: int, ts: float) -> bytes:
    role = "user" if n % 2 == 0 else "assistant"
    return json.dumps({
        "app_name": app, "user_id": "u", "session_id": session, "event_id": f"e{n}",
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts * 1e6) % 1000000:06d}Z",
        "request_id": f"r{n // 2}", "author": "user" if role == "user" else "bot",
        "message": {"role": role, "content": f"message {n} of {session}: some ordinary text about the task at hand"},
    }).encode()  # fmt: skip


async def produce(
    settings: Settings, records: list[tuple[bytes, bytes]], rate: float | None = None
) -> dict[tuple[int, int], float]:
    """Send records; returns {(partition, offset): send time}."""
    kwargs = producer_kwargs(settings.kafka)
    kwargs.update(linger_ms=5, max_batch_size=512 * 1024)
    producer = AIOKafkaProducer(**kwargs)
    await producer.start()
    sent: dict[tuple[int, int], float] = {}
    try:
        futures = []
        start = time.monotonic()
        for i, (key, value) in enumerate(records):
            if rate:
                delay = start + i / rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            futures.append((time.time(), await producer.send(settings.topics.events, value, key=key)))
        for at, fut in futures:
            md = await fut
            sent[(md.partition, md.offset)] = at
    finally:
        await producer.stop()
    return sent


async def committed(settings: Settings, group: str) -> int:
    """Events committed by ``group`` (0 while a fresh broker has no group coordinator yet)."""
    admin = AIOKafkaAdminClient(**common_kwargs(settings.kafka))
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    except GroupCoordinatorNotAvailableError:
        return 0
    finally:
        await admin.close()
    return sum(v.offset for tp, v in offsets.items() if tp.topic == settings.topics.events)


async def wait_jobs_drained(settings: Settings, group: str, timeout: float) -> None:
    """Until the summarize agent committed every job (so phases do not overlap)."""
    from aiokafka import AIOKafkaConsumer

    from streams.clients.kafka_config import consumer_kwargs

    consumer = AIOKafkaConsumer(**consumer_kwargs(settings.kafka), group_id=None)
    await consumer.start()
    admin = AIOKafkaAdminClient(**common_kwargs(settings.kafka))
    await admin.start()
    try:
        tps = [TopicPartition(settings.topics.jobs, p) for p in range(settings.topics.partitions)]
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            ends = await consumer.end_offsets(tps)
            offsets = await admin.list_consumer_group_offsets(group)
            if all(offsets.get(tp) is not None and offsets[tp].offset >= ends[tp] for tp in tps if ends[tp]):
                return
            await asyncio.sleep(0.3)
    finally:
        await admin.close()
        await consumer.stop()


async def wait_consumed(settings: Settings, group: str, total: int, timeout: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if await committed(settings, group) >= total:
            return time.monotonic()
        await asyncio.sleep(0.2)
    raise TimeoutError(f"worker did not consume {total} events in {timeout}s")


async def changelog_records(settings: Settings) -> int:
    return await topic_records(settings, f"{settings.worker.app_id}-track-state-changelog")


async def topic_records(settings: Settings, topic: str) -> int:
    """Records written to ``topic`` so far (sum of its partitions' end offsets)."""
    from aiokafka import AIOKafkaConsumer

    from streams.clients.kafka_config import consumer_kwargs

    consumer = AIOKafkaConsumer(**consumer_kwargs(settings.kafka), group_id=None)
    await consumer.start()
    try:
        ends = await consumer.end_offsets([TopicPartition(topic, p) for p in range(settings.topics.partitions)])
    finally:
        await consumer.stop()
    return sum(ends.values())


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def cpu_s(pid: int) -> float:
    """User + system CPU seconds the process has used so far (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_profiler(pid: int, out: str | None) -> subprocess.Popen[bytes] | None:
    """``py-spy record --gil`` of the worker (``--profile``: what holds the GIL), stopped with SIGINT after the phase."""
    if not out:
        return None
    spy = Path(sys.executable).with_name("py-spy")
    if not spy.exists():  # not installed in the venv: on the PATH (``pip install py-spy``)
        spy = Path(shutil.which("py-spy") or spy)
    return subprocess.Popen([str(spy), "record", "--pid", str(pid), "--gil", "--rate", "200", "--format", "raw", "-o", out],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip


def stop_profiler(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is not None:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    """The process's resident memory now (``VmHWM``: its peak so far), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def main(args: argparse.Namespace) -> None:
    with OpenAIServer() as llm:
        settings = scripted_pipeline_settings(
            load_settings(), llm.base_url, partitions=4, topic_prefix="bench", llm={"model": "zero-latency"},
            event_threshold=args.event_threshold, async_summary_num=8,
        )  # fmt: skip
        settings.worker.log_level = "WARNING"
        apply_worker_knobs(settings, args)
        await create_topics(settings)
        tmp = Path(tempfile.mkdtemp(prefix="bench-"))
        worker = WorkerProcess(settings, tmp / "worker.log")
        group = settings.worker.app_id
        load_before = os.getloadavg()[0]
        try:
            # warm-up: the worker joins and processes a first batch
            warm = [(f"w/u/s{i}".encode(), event_bytes("w", f"s{i}", 0, time.time())) for i in range(200)]
            await produce(settings, warm)
            await wait_consumed(settings, group, len(warm), 120)
            total = len(warm)

            # 1) sustained ingest: events of many sessions as fast as the producer goes
            sessions = max(1, args.events // 40)
            now = time.time()
            burst = [
                (f"b/u/s{s}".encode(), event_bytes("b", f"s{s}", n, now + n))
                for n in range(40)
                for s in range(sessions)
            ]
            spy = start_profiler(worker.proc.pid, args.profile)
            t0, cpu0 = time.monotonic(), cpu_s(worker.proc.pid)
            await produce(settings, burst)
            total += len(burst)
            t1 = await wait_consumed(settings, group, total, 600)
            burst_cpu = cpu_s(worker.proc.pid) - cpu0
            stop_profiler(spy)
            ingest = len(burst) / (t1 - t0)
            await wait_jobs_drained(settings, group, 600)
            burst_all_cpu = cpu_s(worker.proc.pid) - cpu0
            burst_jobs = await topic_records(settings, settings.topics.jobs)

            # 2) latencies under a paced load (sessions fire every 20 events)
            paced_sessions = args.paced_sessions
            now = time.time()
            paced = [
                (f"p/u/s{s}".encode(), event_bytes("p", f"s{s}", n, now + n))
                for n in range(40)
                for s in range(paced_sessions)
            ]
            spy = start_profiler(worker.proc.pid, args.profile and f"{args.profile}.paced")
            cpu0 = cpu_s(worker.proc.pid)
            sent = await produce(settings, paced, rate=args.rate)
            total += len(paced)
            await wait_consumed(settings, group, total, 300)
            paced_cpu = cpu_s(worker.proc.pid) - cpu0
            stop_profiler(spy)
            await asyncio.sleep(3)
            jobs = await read_topic(settings, settings.topics.jobs, timeout=20)
            summaries = await read_topic(settings, settings.topics.summaries, timeout=20)
            job_at: dict[str, float] = {}
            e2j: list[float] = []
            for r in jobs:
                job = json.loads(r.value)
                job_at[job["job_id"]] = r.timestamp / 1000
                if job["app_name"] == "p" and job["upto"]["offset"] is not None:
                    t_ev = sent.get((r.partition, job["upto"]["offset"]))
                    if t_ev is not None:
                        e2j.append((r.timestamp / 1000 - t_ev) * 1000)
            j2s = [(r.timestamp / 1000 - job_at[s["job_id"]]) * 1000 for r in summaries
                   if (s := json.loads(r.value)).get("type") == "summary" and s["job_id"] in job_at and s["app_name"] == "p"]  # fmt: skip

            # 3) RSS with many sessions tracked (one user message each: state, no job)
            now = time.time()
            many = [(f"m/u/s{i}".encode(), event_bytes("m", f"s{i}", 0, now)) for i in range(args.sessions)]
            spy = start_profiler(worker.proc.pid, args.profile and f"{args.profile}.sessions")
            t2, cpu0 = time.monotonic(), cpu_s(worker.proc.pid)
            await produce(settings, many)
            total += len(many)
            t3 = await wait_consumed(settings, group, total, 900)
            many_cpu = cpu_s(worker.proc.pid) - cpu0
            stop_profiler(spy)
            rss = rss_mb(worker.proc.pid)
            changelog = await changelog_records(settings)

            print(f"ingest (track agent, {len(burst)} events, {sessions} sessions): {ingest:,.0f} events/s, "
                  f"worker CPU {burst_cpu / len(burst) * 1e6:.1f} µs/event "
                  f"({burst_all_cpu / len(burst) * 1e6:.1f} µs/event until its {burst_jobs} jobs are summarized)")  # fmt: skip
            print(f"ingest (one-event sessions, {len(many)}): {len(many) / (t3 - t2):,.0f} events/s, "
                  f"worker CPU {many_cpu / len(many) * 1e6:.1f} µs/event")  # fmt: skip
            print(f"paced phase worker CPU: {paced_cpu / len(paced) * 1e6:.1f} µs/event (includes jobs and summaries)")
            print(
                f"event→job  ({len(e2j)} jobs at {args.rate:.0f} ev/s): p50 {pct(e2j, 0.5):.1f} ms, p99 {pct(e2j, 0.99):.1f} ms"
            )
            print(
                f"job→summary ({len(j2s)} summaries, zero-latency LLM): p50 {pct(j2s, 0.5):.1f} ms, p99 {pct(j2s, 0.99):.1f} ms"
            )
            print(
                f"worker RSS with {args.sessions + sessions + paced_sessions + 200:,} sessions tracked: {rss:,.0f} MB"
            )
            print(
                f"track-state changelog records per event: {changelog / total:.2f} ({changelog:,} for {total:,} events)"
            )
            print(
                f"load average (1 min) before/after: {load_before:.1f} / {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
            )
            if e2j:
                print(
                    f"(event→job mean {statistics.mean(e2j):.1f} ms; job→summary mean {statistics.mean(j2s) if j2s else float('nan'):.1f} ms)"
                )
        finally:
            worker.stop()
            # The run's topics, its worker's consumer group and internal (changelog) topics.
            await delete_prefixed(settings.kafka, [settings.topics.events.rsplit(".", 1)[0] + ".", group])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=40_000)
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=500.0, help="paced phase events/s")
    parser.add_argument("--event-threshold", type=int, default=19, help="events per summary (above 40: no jobs at all)")
    parser.add_argument("--paced-sessions", type=int, default=50, help="paced phase sessions (40 events, 2 jobs each)")
    add_worker_knobs(parser)
    parser.add_argument(
        "--profile",
        help="py-spy raw profiles of the worker: ingest phase to PATH, paced to PATH.paced, one-event sessions to PATH.sessions",
    )
    asyncio.run(main(parser.parse_args()))
