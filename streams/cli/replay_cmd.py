"""``distill replay``: rebuild trigger state and summaries from the events topic."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import click

from schemas.settings import Settings, load_settings


@click.command("replay")
@click.option(
    "--session",
    "sessions",
    multiple=True,
    metavar="APP/USER/SESSION",
    help="Only this session (repeatable). A bare SESSION id matches it under every app and user.",
)
@click.option("--from-beginning/--from-latest", default=True, show_default=True,
              help="Read the events topic from its first retained record (or only new records).")  # fmt: skip
@click.option("--idle-exit", default=5.0, show_default=True, help="Stop after this many seconds without progress.")
@click.option("--timeout", default=3600.0, show_default=True, help="Give up after this many seconds.")
def command(sessions: tuple[str, ...], from_beginning: bool, idle_exit: float, timeout: float) -> None:
    """Replay the events topic with a fresh consumer group into new jobs/summaries topics.

    Trigger decisions depend on the event log only (each emitted job is taken as
    done), so replaying twice yields the same boundaries. Summaries whose inputs
    (previous summary, delta, prompt, model) are unchanged are reused from the
    content-addressed cache (filled from the live summaries topic and earlier
    replays) instead of calling the LLM. Output: <summaries>.replay-<RUN>.
    """
    from streams.app.factory import replay_topics

    settings = load_settings()
    run_id = time.strftime("%Y%m%d%H%M%S") + f"-{os.getpid() % 1000:03d}"
    out = replay_topics(settings, run_id)
    asyncio.run(_create_topics(settings, out.jobs, out.summaries))
    workdir = Path(".distill") / "replay"
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / f"{run_id}.log"
    args = ["worker", "--replay-run", run_id, *[a for s in sessions for a in ("--replay-session", s)]]
    if not from_beginning:
        args.append("--replay-from-latest")
    from streams.local_pipeline import distill_executable

    with log_path.open("ab") as log:
        proc = subprocess.Popen([distill_executable(), *args], stdout=log, stderr=subprocess.STDOUT)
    click.echo(f"replay {run_id}: worker pid {proc.pid}, output {out.summaries}, log {log_path}")
    try:
        stats = asyncio.run(_watch(settings, f"{settings.worker.app_id}-replay-{run_id}", out.summaries, proc,
                                   idle_exit, timeout))  # fmt: skip
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
    outcomes = _outcomes(log_path)
    click.echo(
        f"\ndone: {stats['events']} events, {stats['summaries']} summaries "
        f"(LLM calls {outcomes.get('summary', 0)}, reused from cache {outcomes.get('cached', 0)}) → {out.summaries}"
    )


async def _create_topics(settings: Settings, jobs: str, summaries: str) -> None:
    from streams.topics_admin import ensure_topics

    data = settings.model_dump()
    data["topics"].update(jobs=jobs, summaries=summaries)
    for _ in range(10):
        try:
            await ensure_topics(Settings(**data))
            return
        except Exception:
            await asyncio.sleep(0.5)
    await ensure_topics(Settings(**data))


async def _watch(
    settings: Settings, group: str, summaries: str, proc: subprocess.Popen[bytes], idle_exit: float, timeout: float
) -> dict[str, int]:
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient

    from streams.kafka_config import common_kwargs, consumer_kwargs

    admin = AIOKafkaAdminClient(**common_kwargs(settings.kafka))
    consumer = AIOKafkaConsumer(**consumer_kwargs(settings.kafka), group_id=None)
    await admin.start()
    await consumer.start()
    events_tps = [TopicPartition(settings.topics.events, p) for p in range(settings.topics.partitions)]
    out_tps = [TopicPartition(summaries, p) for p in range(settings.topics.partitions)]
    started = last_change = time.monotonic()
    last = (-1, -1)
    done_events = produced = 0
    try:
        while time.monotonic() - started < timeout:
            if proc.poll() is not None:
                raise click.ClickException(f"the replay worker exited with code {proc.returncode}")
            ends = await consumer.end_offsets(events_tps)
            committed = await admin.list_consumer_group_offsets(group)
            done_events = sum(committed[tp].offset for tp in events_tps if tp in committed)
            total = sum(ends.values())
            lag = total - done_events
            produced = sum((await consumer.end_offsets(out_tps)).values())
            rate = done_events / max(time.monotonic() - started, 1e-3)
            click.echo(
                f"\r  events {done_events}/{total} ({rate:,.0f}/s), lag {lag}, summaries {produced}   ", nl=False
            )
            if (done_events, produced) != last:
                last, last_change = (done_events, produced), time.monotonic()
            elif lag == 0 and done_events > 0 and time.monotonic() - last_change > idle_exit:
                break
            await asyncio.sleep(1.0)
    finally:
        await consumer.stop()
        await admin.close()
    return {"events": done_events, "summaries": produced}


def _outcomes(log_path: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in log_path.read_text(errors="replace").splitlines():
        if '"summary published"' in line:
            outcome = json.loads(line).get("outcome", "?")
            counts[outcome] = counts.get(outcome, 0) + 1
    return counts
