# ruff: noqa: E501
"""Backlog drain benchmark: N ``distill worker`` processes in one group draining a backlog.

The workers join, consume a warm-up, and are paused (SIGSTOP); the backlog is produced
(``--events`` 263-byte events of ``--sessions`` interleaved sessions on 4 partitions) and the
workers are resumed (SIGCONT). The clock runs from the resume to the last track-state
changelog record (track: every event changes its key's state) and, with jobs, to the last
summary. CPU is the workers' user + system time over the same stretch (µs per event is the
figure least moved by other load on the machine). ``--rate`` instead paces the events at that
rate into running workers (low-rate CPU per event). Every topic and consumer group a run makes
is deleted at its end.

    .venv/bin/python benchmarks/bench_backlog.py [--events 40000] [--workers 1,2,4] [--jobs] [--repeat 3]
    .venv/bin/python benchmarks/bench_backlog.py --jobs --sessions 100,1000,10000 --per-session 20
    .venv/bin/python benchmarks/bench_backlog.py --rate 500 --events 10000 [--fetch-wait-ms 100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_pipeline import (
    committed,
    event_bytes,
    rss_mb,
    start_profiler,
    stop_profiler,
    wait_jobs_drained,
)
from benchmarks.cpu_clock import process_cpu_s, thread_cpu_s
from benchmarks.worker_knobs import add_worker_knobs, apply_worker_knobs
from schemas.settings import Settings, load_settings
from streams.clients.kafka_config import consumer_kwargs, producer_kwargs
from streams.clients.topics_prune import delete_prefixed
from tests.integration.pipeline_support import WorkerProcess, create_topics, scripted_pipeline_settings
from tests.support.openai_server import OpenAIServer

PARTITIONS = 4
IDLE_S = 10.0
"""With ``--rate``: seconds the workers' idle CPU is measured for before the paced events."""


def backlog(sessions: int, per_session: int, tag: str) -> list[tuple[bytes, bytes]]:
    """``per_session`` events of each of ``sessions`` sessions, interleaved (event n of every session, then n+1)."""
    now = time.time()
    return [
        (f"{tag}/u/s{s}".encode(), event_bytes(tag, f"s{s}", n, now + n))
        for n in range(per_session)
        for s in range(sessions)
    ]


async def produce(settings: Settings, records: list[tuple[bytes, bytes]], rate: float | None = None) -> None:
    kwargs = producer_kwargs(settings.kafka)
    kwargs.update(linger_ms=5, max_batch_size=256 * 1024)
    producer = AIOKafkaProducer(**kwargs)
    await producer.start()
    try:
        futures = []
        start = time.monotonic()
        for i, (key, value) in enumerate(records):
            if rate:
                delay = start + i / rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            futures.append(await producer.send(settings.topics.events, value, key=key))
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def last_timestamp(settings: Settings, topic: str) -> float | None:
    """Timestamp (s) of the newest record of ``topic`` (the last record of each partition)."""
    consumer = AIOKafkaConsumer(**consumer_kwargs(settings.kafka), group_id=None, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        ends = await consumer.end_offsets(tps)
        tps = [tp for tp in tps if ends[tp] > 0]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, ends[tp] - 1)
        newest: float | None = None
        pending = set(tps)
        deadline = time.monotonic() + 20
        while pending and time.monotonic() < deadline:
            for tp, msgs in (await consumer.getmany(timeout_ms=500)).items():
                for m in msgs:
                    if m.offset == ends[tp] - 1:
                        pending.discard(tp)
                        newest = max(newest or 0.0, m.timestamp / 1000)
        return newest
    finally:
        await consumer.stop()


def thread_split(pid: int, before: dict[int, float], events: int) -> dict[str, float]:
    """Where ``pid``'s CPU since ``before`` (``thread_cpu_s``) went, in µs per event: its main thread (the
    event loop) and the others (the consumer's thread with aiokafka's fetcher, executor threads, ...)."""
    threads = {tid: used - before.get(tid, 0.0) for tid, used in thread_cpu_s(pid).items()}
    main = threads.pop(pid, 0.0)
    others = sorted(threads.values(), reverse=True)
    return {"main_thread_us": main / events * 1e6, "other_threads_us": sum(others) / events * 1e6,
            "busiest_other_thread_us": (others[0] if others else 0.0) / events * 1e6}  # fmt: skip


async def wait_committed(settings: Settings, group: str, total: int, timeout: float) -> None:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if await committed(settings, group) >= total:
            return
        await asyncio.sleep(0.2)
    raise TimeoutError(f"workers did not consume {total} events in {timeout}s")


async def bench_topics(llm_base_url: str, event_threshold: int) -> tuple[Settings, str, str]:
    """A run's settings (fresh topics, created; the zero-latency model at ``llm_base_url``; workers at
    WARNING), the prefix of its topic names and its worker group: what the run deletes at its end."""
    settings = scripted_pipeline_settings(
        load_settings(), llm_base_url, partitions=PARTITIONS, topic_prefix="bench", llm={"model": "zero-latency"},
        event_threshold=event_threshold, async_summary_num=8,
    )  # fmt: skip
    settings.worker.log_level = "WARNING"
    await create_topics(settings)
    return settings, settings.topics.events.rsplit(".", 1)[0] + ".", settings.worker.app_id


async def run(args: argparse.Namespace, n_workers: int, sessions: int, per_session: int) -> dict[str, float]:
    with OpenAIServer() as llm:
        settings, run_prefix, group = await bench_topics(llm.base_url, 19 if args.jobs else 1_000_000)
        apply_worker_knobs(settings, args)
        tmp = Path(tempfile.mkdtemp(prefix="bench-backlog-"))
        workers = [WorkerProcess(settings, tmp / f"worker-{i}.log") for i in range(n_workers)]
        try:
            warm = [(f"w/u/s{i}".encode(), event_bytes("w", f"s{i}", 0, time.time())) for i in range(400)]
            await produce(settings, warm)
            await wait_committed(settings, group, len(warm), 180)
            # Startup work is over (the summarizer's SDK import, ~1 s of CPU in a thread; the warm-up's
            # commits): it is not the drain's.
            await asyncio.sleep(6)
            total = len(warm) + sessions * per_session
            records = backlog(sessions, per_session, "b")
            pids = [w.proc.pid for w in workers]
            if args.rate:
                # What the workers burn with nothing to do (timers, commits, heartbeats, fetch polls).
                idle0, i0 = sum(map(process_cpu_s, pids)), time.monotonic()
                await asyncio.sleep(IDLE_S)
                idle_ms_s = (sum(map(process_cpu_s, pids)) - idle0) / (time.monotonic() - i0) * 1e3
                cpu0, t0 = sum(map(process_cpu_s, pids)), time.time()
                threads0 = thread_cpu_s(pids[0])
                spy = start_profiler(pids[0], args.profile)
                await produce(settings, records, rate=args.rate)
                stop_profiler(spy)
                await wait_committed(settings, group, total, 600)
                if args.jobs:
                    await wait_jobs_drained(settings, group, 600)
                cpu = sum(map(process_cpu_s, pids)) - cpu0
                seconds = time.time() - t0
                return {"cpu_us": cpu / len(records) * 1e6, "seconds": seconds, "idle_ms_s": idle_ms_s,
                        "idle_us": idle_ms_s * 1e-3 * seconds / len(records) * 1e6,
                        **thread_split(pids[0], threads0, len(records))}  # fmt: skip
            for pid in pids:
                os.kill(pid, signal.SIGSTOP)
            p0 = time.monotonic()
            await produce(settings, records)
            produced_s = time.monotonic() - p0
            cpu0 = sum(map(process_cpu_s, pids))
            threads0 = thread_cpu_s(pids[0])
            t0 = time.time()
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
            spy = start_profiler(pids[0], args.profile)
            await wait_committed(settings, group, total, 900)
            cpu_track = sum(map(process_cpu_s, pids)) - cpu0
            split = thread_split(pids[0], threads0, len(records) // len(pids))
            stop_profiler(spy)
            t_track = await last_timestamp(settings, f"{group}-track-state-changelog")
            out = {"events_s": len(records) / ((t_track or time.time()) - t0), "cpu_us": cpu_track / len(records) * 1e6,
                   "produce_s": produced_s, **split}  # fmt: skip
            if args.jobs:
                spy = start_profiler(pids[0], args.profile_jobs)
                await wait_jobs_drained(settings, group, 900)
                stop_profiler(spy)
                cpu_all = sum(map(process_cpu_s, pids)) - cpu0
                t_sum = await last_timestamp(settings, settings.topics.summaries)
                jobs = await topic_count(settings, settings.topics.jobs)
                out.update(drain_s=(t_sum or time.time()) - t0, cpu_all_us=cpu_all / len(records) * 1e6,
                           jobs=jobs, cpu_per_job_ms=(cpu_all - cpu_track) / max(1, jobs) * 1e3)  # fmt: skip
            out["peak_rss_mb"] = max(rss_mb(pid, "VmHWM") for pid in pids)
            return out
        finally:
            for w in workers:
                w.stop()
            await delete_prefixed(settings.kafka, [run_prefix, group])


async def topic_count(settings: Settings, topic: str) -> int:
    consumer = AIOKafkaConsumer(**consumer_kwargs(settings.kafka), group_id=None)
    await consumer.start()
    try:
        ends = await consumer.end_offsets([TopicPartition(topic, p) for p in range(PARTITIONS)])
    finally:
        await consumer.stop()
    return sum(ends.values())


def summary(rows: list[dict[str, float]], key: str) -> str:
    values = [r[key] for r in rows if key in r]
    if not values:
        return "-"
    fmt = "{:,.0f}" if max(values) >= 100 else "{:,.2f}"
    return f"{fmt.format(min(values))} / {fmt.format(statistics.median(values))}"


async def main(args: argparse.Namespace) -> None:
    sweep = [int(s) for s in args.sessions.split(",")]
    for n in (int(w) for w in args.workers.split(",")):
        for sessions in sweep:
            per = args.per_session or max(1, args.events // sessions)
            rows = []
            for _ in range(args.repeat):
                rows.append(await run(args, n, sessions, per))
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
            label = f"{n} worker(s), {sessions:,} sessions x {per} events, {'jobs' if args.jobs else 'track only'}"
            if args.rate:
                print(
                    f"{label} at {args.rate:.0f} ev/s: CPU {summary(rows, 'cpu_us')} µs/event, of which the idle "
                    f"worker's {summary(rows, 'idle_us')} ({summary(rows, 'idle_ms_s')} ms CPU per s idle); first "
                    f"worker's main thread {summary(rows, 'main_thread_us')}, other threads "
                    f"{summary(rows, 'other_threads_us')} (busiest {summary(rows, 'busiest_other_thread_us')}) "
                    f"(min / median of {len(rows)})"
                )
                continue
            print(f"{label}: {summary(rows, 'events_s')} events/s, CPU {summary(rows, 'cpu_us')} µs/event"
                  + (f"; drained with jobs in {summary(rows, 'drain_s')} s, CPU {summary(rows, 'cpu_all_us')} µs/event,"
                     f" {summary(rows, 'cpu_per_job_ms')} ms CPU per job ({rows[0].get('jobs', 0):.0f} jobs)" if args.jobs else "")
                  + f"; first worker's main thread {summary(rows, 'main_thread_us')}, other threads "
                    f"{summary(rows, 'other_threads_us')} µs/event (its share of the events)"
                  + f"; worker peak RSS {summary(rows, 'peak_rss_mb')} MiB"
                  + f" (min / median of {len(rows)}; backlog produced in {summary(rows, 'produce_s')} s)", flush=True)  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=40_000)
    parser.add_argument("--sessions", default="1000", help="interleaved sessions (comma list: a sweep)")
    parser.add_argument("--per-session", type=int, default=0, help="events per session (default: events / sessions)")
    parser.add_argument("--workers", default="1", help="workers in the group (comma list)")
    parser.add_argument("--jobs", action="store_true", help="summarize every 20 events (zero-latency LLM)")
    add_worker_knobs(parser)
    parser.add_argument("--rate", type=float, default=0.0, help="pace the events at this rate into running workers")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", help="py-spy raw profile of the first worker over the track drain to PATH")
    parser.add_argument(
        "--profile-jobs",
        help="with --jobs: py-spy raw profile of the first worker from the end "
        "of the track drain until every job is answered, to PATH",
    )
    asyncio.run(main(parser.parse_args()))
