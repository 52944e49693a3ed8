"""What a wake-up costs this machine: the same work, back to back and after a sleep.

At 500 events/s the worker's own per-event code (decoding, the track rules) cost about three
times its CPU under a backlog (``bench_backlog.py --rate 500 --profile``, per function), although
it runs the same lines on the same bytes. This measures the effect without Kafka or Faust:
one thread decodes a batch of ``--batch`` events (the worker's decoder, 263-byte events) then
sleeps ``--sleeps`` milliseconds, ``--rounds`` times, and prints the thread's CPU per event for
each sleep. Back to back the caches stay warm; after a sleep the process (on a KVM vCPU that
idled meanwhile, with the broker's and Cassandra's JVMs run on the same two cores) starts cold.

    .venv/bin/python benchmarks/bench_wake.py [--batch 17] [--sleeps 0,1,5,30,100] [--rounds 300]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_pipeline import event_bytes
from streams.app.decoding import decode_event_record

MAX_RECORD_BYTES = 10_000_000


def cpu_per_event_us(events: list[bytes], sleep_ms: float, rounds: int) -> float:
    """This thread's CPU per decoded event over ``rounds`` batches, each followed by a ``sleep_ms`` sleep."""
    start = time.thread_time()
    for _ in range(rounds):
        for value in events:
            decode_event_record(value, MAX_RECORD_BYTES)
        if sleep_ms:
            time.sleep(sleep_ms / 1000)
    return (time.thread_time() - start) / (rounds * len(events)) * 1e6


def main(args: argparse.Namespace) -> None:
    now = time.time()
    events = [event_bytes("wake", f"s{i}", i, now + i) for i in range(args.batch)]
    cpu_per_event_us(events, 0, 200)  # warm-up: imports, pydantic's first validations
    sleeps = [float(s) for s in args.sleeps.split(",")]
    warm = cpu_per_event_us(events, 0, args.rounds)
    for sleep_ms in sleeps:
        used = cpu_per_event_us(events, sleep_ms, args.rounds)
        print(
            f"batches of {args.batch}, sleep {sleep_ms:g} ms between: {used:.1f} µs CPU/event "
            f"({used / warm:.1f}x back to back, {(used - warm) * args.batch:.0f} µs more per wake-up)",
            flush=True,
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=17, help="events decoded per wake-up (500 ev/s, 30 ms fetches)")
    parser.add_argument("--sleeps", default="0,1,5,30,100", help="milliseconds slept between batches")
    parser.add_argument("--rounds", type=int, default=300)
    main(parser.parse_args())
