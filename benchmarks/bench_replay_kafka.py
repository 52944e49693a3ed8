# ruff: noqa: E501
"""``distill replay`` end to end on the real Kafka: what an operator's replay costs.

``benchmarks/bench_replay.py`` times the replay *engine* in one process (no Kafka). This
one runs what a user runs: a live ``distill worker`` summarizes a backlog (``--sessions``
interleaved sessions × ``--rounds`` user/assistant rounds on 4 partitions, a zero-latency
model over HTTP), then ``distill replay --no-adopt`` rebuilds it

(a) unchanged: every job is answered by the cache filled from the live summaries topic — 0 LLM calls;
(b) with a changed prompt: every boundary is redone (LLM calls = boundaries).

Per run it prints the command's wall time (boot, cache load and the idle wait included), when
its group first committed events and when the last summary was written (from the launch),
the events drain (first to last committed event of the replay's group, polled every 0.25 s;
the workers commit every second) and the replay workers' CPU per event over it, beside
the LLM calls and cache hits the command reports. The events drain ends before the jobs do
(the last summaries come later) and is scaled from the events after the first commit, so it
also prints the CPU per event up to the last summary from the workers' last idle poll before
their first commit (boot and imports done, every event and the summary jobs' tail included:
the figure to compare two builds by) and from their launch (boot included). The boundaries
of (a) and (b) must equal the live run's (checked). Every topic and consumer group the run
makes is deleted.

    .venv/bin/python benchmarks/bench_replay_kafka.py [--sessions 200] [--rounds 60] [--event-threshold 12] [--workers 1,2] [--hit-only] [--recent-events-mb N] [--profile PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_backlog import backlog, bench_topics, last_timestamp, produce, topic_count, wait_committed
from benchmarks.bench_pipeline import committed, start_profiler, stop_profiler, wait_jobs_drained
from benchmarks.cpu_clock import process_cpu_s
from schemas.settings import Settings
from streams.clients.topics_prune import delete_prefixed
from tests.integration.pipeline_support import (
    DISTILL,
    ROOT,
    WorkerProcess,
    read_topic,
    summaries_of,
    worker_env,
)
from tests.support.openai_server import OpenAIServer

CHANGED_PROMPT = "请用要点总结这段对话：{conversation_text}"
_DONE = re.compile(r"done: (\d+) events, (\d+) summaries \(LLM calls (\d+), reused from cache (\d+)\) → (\S+)")
_PIDS = re.compile(r"worker pid ([\d, ]+), output")
POLL_S = 0.25
IDLE_CPU_S = 0.03
"""CPU the workers use over one poll (~0.3 s) while they wait for their group: less is idle."""


@dataclass
class ReplayRun:
    wall_s: float
    boot_s: float
    last_summary_s: float
    drain_s: float
    drain_cpu_s: float
    work_cpu_s: float
    """The workers' CPU from their last idle poll before the first commit (boot done, partitions
    assigned, waiting for the group) to the last summary: every event and job, no boot."""
    whole_cpu_s: float
    """The workers' CPU from their launch to the last summary."""
    events: int
    summaries: int
    llm_calls: int
    cache_hits: int
    topic: str


def boundaries(records: list[object]) -> dict[tuple[str, str], list[str]]:
    out: dict[tuple[str, str], list[str]] = {}
    for s in sorted(summaries_of(records), key=lambda s: (s["session_id"], s["filter_key"], s["version"])):
        out.setdefault((s["session_id"], s["filter_key"]), []).append(s["boundary"]["last_event_id"])
    return out


async def replay(
    settings: Settings, events: int, summaries: int, profile: str | None = None, workers: int = 1
) -> ReplayRun:
    """``distill replay --no-adopt --workers N`` over the events topic; its group's progress and the
    records on its output topic (``summaries`` of them when it is done) polled meanwhile."""
    t0, wall0 = time.monotonic(), time.time()
    proc = subprocess.Popen([DISTILL, "replay", "--no-adopt", "--idle-exit", "2", "--workers", str(workers)],
                            env=worker_env(settings), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=str(ROOT))  # fmt: skip
    assert proc.stdout is not None
    out: list[str] = []
    pids: list[int] = []
    while not pids:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError("distill replay ended before starting its worker:\n" + "".join(out))
        out.append(line)
        found = _PIDS.search(line)
        pids = [int(p) for p in found.group(1).split(", ")] if found else []
    pid = pids[0]
    run_id = re.search(r"replay (\S+) started", "".join(out))
    assert run_id is not None, out
    group = f"{settings.worker.app_id}-replay-{run_id.group(1)}"
    output = re.search(r", output (\S+), log", "".join(out))
    assert output is not None, out
    spy = start_profiler(pid, profile)
    first: tuple[float, float, int] | None = None
    done: tuple[float, float] | None = None
    written: float | None = None  # CPU when the last summary was on the output topic
    idle = 0.0  # CPU at the last poll before the first commit that found the workers idle
    cpu = previous = 0.0
    while proc.poll() is None and (done is None or written is None):
        try:
            cpu = sum(process_cpu_s(p) for p in pids)
        except OSError:
            break
        n = await committed(settings, group)
        now = time.monotonic()
        if first is None and n == 0 and cpu - previous < IDLE_CPU_S:
            idle = cpu
        previous = cpu
        if n > 0 and first is None:
            first = (now, cpu, n)
        if n >= events and done is None:
            done = (now, cpu)
        if written is None and await topic_count(settings, output.group(1)) >= summaries:
            written = cpu
        await asyncio.sleep(POLL_S)
    stop_profiler(spy)
    rest, _ = proc.communicate(timeout=600)
    text = "".join(out) + rest
    if proc.returncode != 0 or first is None or done is None or written is None:
        raise RuntimeError(f"distill replay failed (rc {proc.returncode}):\n{text[-4000:]}")
    summary = _DONE.search(text)
    assert summary is not None, text
    drained = events - first[2]
    newest = await last_timestamp(settings, summary.group(5))
    return ReplayRun(
        wall_s=time.monotonic() - t0, boot_s=first[0] - t0, last_summary_s=(newest or time.time()) - wall0,
        drain_s=max(POLL_S, (done[0] - first[0]) * events / max(1, drained)),  # a drain within one poll: ~one poll
        drain_cpu_s=(done[1] - first[1]) * events / max(1, drained),
        work_cpu_s=written - idle, whole_cpu_s=written, events=int(summary.group(1)),
        summaries=int(summary.group(2)), llm_calls=int(summary.group(3)), cache_hits=int(summary.group(4)),
        topic=summary.group(5),
    )  # fmt: skip


def line(name: str, run: ReplayRun) -> str:
    return (
        f"{name:<24} {run.events:>7} events: command {run.wall_s:5.1f} s ({run.events / run.wall_s:>6,.0f} events/s; "
        f"first events committed at {run.boot_s:4.1f} s, last summary at {run.last_summary_s:4.1f} s), events drain {run.drain_s:5.1f} s ({run.events / run.drain_s:>7,.0f} events/s, "
        f"{run.drain_cpu_s / run.events * 1e6:5.0f} µs CPU/event = {run.events / max(run.drain_cpu_s, 1e-9):>7,.0f} per CPU s); "
        f"to the last summary {run.work_cpu_s / run.events * 1e6:5.0f} µs CPU/event without boot "
        f"({run.whole_cpu_s / run.events * 1e6:5.0f} from launch); "
        f"summaries {run.summaries}, LLM calls {run.llm_calls}, cache hits {run.cache_hits}"
    )


async def main(args: argparse.Namespace) -> None:
    with OpenAIServer() as llm:
        settings, run_prefix, group = await bench_topics(llm.base_url, args.event_threshold)
        if args.recent_events_mb is not None:  # a replay larger than the workers' record buffer
            settings.worker.recent_events_mb = args.recent_events_mb
        tmp = Path(tempfile.mkdtemp(prefix="bench-replay-"))
        try:
            records = backlog(args.sessions, args.rounds * 2, "r")
            await produce(settings, records)
            t0 = time.monotonic()
            live = WorkerProcess(settings, tmp / "live.log")
            try:
                await wait_committed(settings, group, len(records), 900)
                await wait_jobs_drained(settings, group, 900)
            finally:
                live.stop()
            live_records = await read_topic(settings, settings.topics.summaries, timeout=10)
            expected = boundaries(live_records)
            print(f"live run: {len(records)} events, {sum(map(len, expected.values()))} summaries in "
                  f"{time.monotonic() - t0:.1f} s (worker boot included)", flush=True)  # fmt: skip
            for i, workers in enumerate(int(w) for w in args.workers.split(",")):
                # A prompt of its own per run: an earlier run's summaries fill the cache of the next.
                changed = settings.model_copy(deep=True)
                changed.summary.prompt = f"({i}) {CHANGED_PROMPT}"
                made = sum(map(len, expected.values()))
                hit = await replay(settings, len(records), made, args.profile, workers)
                print(line(f"full cache hit, {workers} w", hit), flush=True)
                assert hit.llm_calls == 0, "a replay of an unchanged log called the model"
                assert boundaries(await read_topic(settings, hit.topic, timeout=10)) == expected
                if args.hit_only:
                    continue
                redo = await replay(changed, len(records), made, None, workers)
                print(line(f"changed prompt, {workers} w", redo), flush=True)
                assert redo.llm_calls == sum(map(len, expected.values())), (
                    "the changed prompt did not redo every boundary"
                )
                assert boundaries(await read_topic(settings, redo.topic, timeout=10)) == expected
        finally:
            await delete_prefixed(settings.kafka, [run_prefix, group])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=60, help="user/assistant rounds per session")
    parser.add_argument("--event-threshold", type=int, default=12)
    parser.add_argument(
        "--profile", help="py-spy raw profile of the replay's first worker (full cache hit runs) to PATH"
    )
    parser.add_argument("--hit-only", action="store_true", help="only the full cache hit runs (no changed prompt)")
    parser.add_argument(
        "--recent-events-mb", type=int, help="the workers' record buffer (worker.recent_events_mb; default its default)"
    )
    parser.add_argument(
        "--workers",
        default="1,2",
        help="replay worker processes (comma list: each runs both replays; a count may repeat)",
    )
    asyncio.run(main(parser.parse_args()))
