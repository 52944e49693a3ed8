"""``distill replay``: rebuild trigger state and summaries from the events topic."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import click

from schemas import SessionKey
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
              help="Read the events topic from its first retained record (or only the records that arrive "
                   "after the command starts; it ends once they are summarized and idle).")  # fmt: skip
@click.option("--app", "apps", multiple=True, metavar="APP", help="Only the sessions of this app (repeatable).")
@click.option("--idle-exit", default=5.0, show_default=True, help="Stop after this many seconds without progress.")
@click.option("--timeout", default=3600.0, show_default=True, help="Give up after this many seconds.")
@click.option("--llm-concurrency", type=click.IntRange(min=1), default=None,
              help="At most this many LLM calls at once, over all the run's workers "
                   "(default: summary.async_summary_num per worker).")  # fmt: skip
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Worker processes the run shares its partitions among (a core each; at most the "
                   "partitions). One that dies is replaced by the others at the next rebalance.")  # fmt: skip
@click.option("--resume", "resume_run", default=None, metavar="RUN",
              help="Continue the replay RUN after a crash: its consumer group, topics and state.")  # fmt: skip
@click.option("--adopt/--no-adopt", default=True, show_default=True,
              help="Once the run is done, switch each replayed session to the run's epoch if it caught up "
                   "with the live line (see 'distill epochs adopt').")  # fmt: skip
@click.option("--adopt-timeout", default=60.0, show_default=True,
              help="Seconds to wait for the workers' answers to the switches.")  # fmt: skip
@click.option("--dry-run", is_flag=True,
              help="Say how many keys and boundaries the replay would summarize and how many the cache "
                   "answers, without running it (reads the events and summaries topics, calls no model).")  # fmt: skip
def command(
    sessions: tuple[str, ...],
    from_beginning: bool,
    apps: tuple[str, ...],
    idle_exit: float,
    timeout: float,
    llm_concurrency: int | None,
    resume_run: str | None,
    adopt: bool,
    adopt_timeout: float,
    dry_run: bool,
    workers: int,
) -> None:
    """Replay the events topic with a fresh consumer group into a new summary epoch.

    Trigger decisions are a pure function of the event log (each decided against
    the previous job's target, whatever the LLM latency), so a replay reaches the
    live run's boundaries and replaying twice yields the same ones. Timed-out
    jobs are re-emitted as in a live run. Summaries whose inputs
    (previous summary, delta, prompt, model) are unchanged are reused from the
    content-addressed cache (filled from the live summaries topic and earlier
    replays) instead of calling the LLM. Output: epoch N (the next number, claimed:
    two runs started at once get distinct numbers) on <summaries>.replay-eN-<time>-<id>;
    then each replayed session whose epoch caught up with the live line is switched
    to it (--no-adopt: not). --resume skips (and names) the sessions that already
    adopted the run's epoch: the live worker continues their line.
    """
    from streams.app.factory import replay_topics, session_filter
    from streams.cli.epochs_admin import (
        adopted_sessions,
        claim_epoch,
        new_run_id,
        run_epoch,
        start_group_at_end,
        write_excluded,
    )

    settings = load_settings()
    specs = (*sessions, *(f"{app}/*/*" for app in apps))
    if workers > settings.topics.partitions:
        raise click.BadParameter(
            f"{workers} workers for {settings.topics.partitions} partitions: the extra ones would idle",
            param_hint="--workers",
        )
    shares = llm_shares(llm_concurrency, workers) if llm_concurrency is not None else None
    if dry_run:
        _dry_run(settings, specs)
        return
    # A new run claims its epoch (only one run gets each number); a resumed run keeps its own.
    epoch = run_epoch(resume_run) if resume_run else asyncio.run(claim_epoch(settings))
    run_id = resume_run or new_run_id(epoch or 0, from_latest=not from_beginning)
    excluded: set[SessionKey] = set()
    if resume_run and epoch:
        accept = session_filter(set(specs)) if specs else None
        excluded = {k for k in asyncio.run(adopted_sessions(settings, epoch)) if accept is None or accept(k)}
    out = replay_topics(settings, run_id)
    asyncio.run(_create_topics(settings, out.jobs, out.summaries))
    workdir = Path(".distill") / "replay"
    workdir.mkdir(parents=True, exist_ok=True)
    log_paths = worker_logs(workdir, run_id, workers)
    # The run's LLM calls and cache hits are counted from its log's "summary made" lines (INFO).
    args = ["worker", "--loglevel", "INFO", "--replay-run", run_id]
    args += [a for s in specs for a in ("--replay-session", s)]
    if epoch:
        args += ["--replay-epoch", str(epoch)]
    if excluded:
        click.echo(adopted_note(epoch or 0, excluded))
        exclude_path = (workdir / f"{run_id}.excluded.json").resolve()
        write_excluded(exclude_path, excluded)
        args += ["--replay-exclude-file", str(exclude_path)]
    group = f"{settings.worker.app_id}-replay-{run_id}"
    start: dict[int, int] = {}
    if not from_beginning:
        start = asyncio.run(start_group_at_end(settings, group, settings.topics.events))
    from streams.services.local_pipeline import distill_executable

    procs: list[subprocess.Popen[bytes]] = []
    for i, log_path in enumerate(log_paths):
        own = [*args, "--replay-concurrency", str(shares[i])] if shares else args
        with log_path.open("ab") as log:
            procs.append(subprocess.Popen([distill_executable(), *own], stdout=log, stderr=subprocess.STDOUT))
    verb = "resumed" if resume_run else "started"
    pids = ", ".join(str(p.pid) for p in procs)
    logs = ", ".join(str(p) for p in log_paths)
    click.echo(f"replay {run_id} {verb} (epoch {epoch}): worker pid {pids}, output {out.summaries}, "
               f"log {logs}")  # fmt: skip
    click.echo(f"  (after a crash: distill replay --resume {run_id})")
    try:
        stats = asyncio.run(_watch(settings, group, out.jobs, out.summaries, procs, log_paths, idle_exit, timeout,
                                   start))  # fmt: skip
    finally:
        _stop(procs)
    outcomes = _outcomes(log_paths)
    click.echo("")
    if adopt and epoch:
        from streams.cli.epochs_cmd import adopt_sessions

        adopt_sessions(settings, epoch, set(specs), require_caught_up=True, source=run_id, timeout=adopt_timeout,
                       resume_hint=f"distill replay --resume {run_id}", exclude=excluded)  # fmt: skip
    click.echo(
        f"done: {stats['events']} events, {stats['summaries']} summaries "
        f"(LLM calls {outcomes.get(MODEL_CALLS, 0)}, reused from cache {outcomes.get('cached', 0)}) → {out.summaries}"
    )


def llm_shares(total: int, workers: int) -> list[int]:
    """Each worker's bound on its concurrent LLM calls, so that together they make at most ``total``."""
    if total < workers:
        raise click.BadParameter(
            f"{total} concurrent LLM calls cannot be shared by {workers} workers (each needs at least one)",
            param_hint="--llm-concurrency",
        )
    return [total // workers + (1 if i < total % workers else 0) for i in range(workers)]


def worker_logs(workdir: Path, run_id: str, workers: int) -> list[Path]:
    """One log per worker: ``RUN.log`` for the first (as a run of one worker), ``RUN.wN.log`` for the others."""
    return [workdir / (f"{run_id}.log" if i == 0 else f"{run_id}.w{i + 1}.log") for i in range(workers)]


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM every worker still running (all at once: their shutdowns overlap), then SIGKILL the late ones."""
    running = [p for p in procs if p.poll() is None]
    for proc in running:
        proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 30
    for proc in running:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def adopted_note(epoch: int, sessions: set[SessionKey], limit: int = 20) -> str:
    """What a resume says about the sessions it refuses (they adopted its epoch)."""
    names = sorted("/".join(k) for k in sessions)
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    listed = ", ".join(names[:limit]) + more
    return (
        f"not resumed: {len(names)} sessions already adopted epoch {epoch} (the live worker continues their line "
        f"of it with its own versions; a replay writing it too would make conflicting versions): {listed}"
    )


async def _create_topics(settings: Settings, jobs: str, summaries: str) -> None:
    from streams.clients.topics_admin import ensure_topics

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
    settings: Settings,
    group: str,
    jobs: str,
    summaries: str,
    procs: list[subprocess.Popen[bytes]],
    log_paths: list[Path],
    idle_exit: float,
    timeout: float,
    start: dict[int, int] | None = None,
) -> dict[str, int]:
    """Follow the replay worker until it is done: every event, job and summary of the run consumed
    (committed by its group: a job is acked only once answered), and nothing new for ``idle_exit`` s.
    ``start``: per events partition, the offset the run began at (``--from-latest``; else 0), from
    which its events are counted.

    Events alone are not enough: a job whose model call is still running (or retrying) leaves the
    events consumed and nothing new produced, and stopping then ended runs without their summaries.

    A worker that exits while others run is reported once; the group's next rebalance gives its
    partitions to the others (their changelogs hold its state; its uncommitted work is redone). The
    run fails only when no worker is left.
    """
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient

    from streams.clients.kafka_config import common_kwargs, consumer_kwargs

    admin = AIOKafkaAdminClient(**common_kwargs(settings.kafka))
    consumer = AIOKafkaConsumer(**consumer_kwargs(settings.kafka), group_id=None)
    await admin.start()
    await consumer.start()
    events_tps = [TopicPartition(settings.topics.events, p) for p in range(settings.topics.partitions)]
    out_tps = [TopicPartition(summaries, p) for p in range(settings.topics.partitions)]
    job_tps = [TopicPartition(jobs, p) for p in range(settings.topics.partitions)]
    begin = {TopicPartition(settings.topics.events, p): offset for p, offset in (start or {}).items()}
    started = last_change = time.monotonic()
    last = (-1, -1, -1)
    positions: dict[Any, int] = {}
    committed: dict[Any, Any] = {}
    done_events = produced = lag = unanswered = 0
    reported: set[int] = set()
    try:
        while time.monotonic() - started < timeout:
            exited = [p for p in procs if p.poll() is not None]
            if len(exited) == len(procs):
                codes = ", ".join(str(p.returncode) for p in procs)
                raise click.ClickException(f"the replay worker{'s' if len(procs) > 1 else ''} exited (code {codes})")
            for p in exited:
                if p.pid not in reported:
                    reported.add(p.pid)
                    click.echo(f"\n  worker pid {p.pid} exited with code {p.returncode}: the others take over its "
                               f"partitions at the next rebalance")  # fmt: skip
            ends = await consumer.end_offsets(events_tps)
            committed = await _committed(admin, group)
            done_events = sum(committed[tp].offset - begin.get(tp, 0) for tp in events_tps if tp in committed)
            total = sum(end - begin.get(tp, 0) for tp, end in ends.items())
            lag = total - done_events
            out_ends = await consumer.end_offsets(out_tps)
            produced = sum(out_ends.values())
            positions = {**ends, **await consumer.end_offsets(job_tps), **out_ends}
            # Jobs and summaries the run wrote but its worker has not finished with yet.
            unanswered = sum(end - (committed[tp].offset if tp in committed else 0)
                             for tp, end in positions.items() if tp not in ends)  # fmt: skip
            click.echo("\r  " + progress_line(done_events, total, time.monotonic() - started, produced), nl=False)
            if (done_events, produced, unanswered) != last:
                last, last_change = (done_events, produced, unanswered), time.monotonic()
            elif settled(done_events, total, unanswered) and time.monotonic() - last_change > idle_exit:
                break
            await asyncio.sleep(1.0)
        else:
            where = ""
            alive = [(p, path) for p, path in zip(procs, log_paths, strict=True) if p.poll() is None]
            if alive:
                # A worker writes every thread's stack to its log on SIGQUIT (from C: a blocked
                # event loop answers too) and Faust's asyncio tasks on SIGUSR1: a run that stalled
                # says where it waits.
                for p, _ in alive:
                    p.send_signal(signal.SIGQUIT)
                await asyncio.sleep(0.5)
                for p, _ in alive:
                    p.send_signal(signal.SIGUSR1)
                await asyncio.sleep(2.0)
                where = f"; its workers' stacks and tasks are at the end of {', '.join(str(p) for _, p in alive)}"
                states = "; ".join(f"pid {p.pid}: {worker_state(_log_text(path))}" for p, path in alive)
                where += f"; workers: {states}"
            raise click.ClickException(
                f"the replay did not finish in {timeout:g} s: {lag} events not yet consumed, {unanswered} jobs "
                f"and summaries not yet answered (raise --timeout; the run resumes with --resume){where}; "
                f"behind (committed/end): {behind(positions, committed, begin) or 'none'}"
            )
    finally:
        await consumer.stop()
        await admin.close()
    return {"events": done_events, "summaries": produced}


async def _committed(admin: Any, group: str) -> dict[Any, Any]:
    """The group's committed offsets; none while the broker has no coordinator for it yet.

    A fresh broker creates its offsets topic at the first group request and answers
    "coordinator not available" meanwhile (a retriable error): nothing is committed then.
    """
    from aiokafka.errors import KafkaError

    try:
        return dict(await admin.list_consumer_group_offsets(group))
    except KafkaError as exc:
        if not exc.retriable:
            raise
        return {}


def behind(ends: dict[Any, int], committed: dict[Any, Any], begin: dict[Any, int]) -> str:
    """``topic[p] committed/end`` of each partition the group has not committed to its end (what a stalled
    run waits for: events not consumed, or a job or summary consumed but never acknowledged)."""
    out = []
    for tp, end in sorted(ends.items(), key=lambda item: (item[0].topic, item[0].partition)):
        done = committed[tp].offset if tp in committed else begin.get(tp, 0)
        if done < end:
            out.append(f"{tp.topic}[{tp.partition}] {done}/{end}")
    return ", ".join(out)


def _log_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def worker_state(log_text: str, warning_chars: int = 400) -> str:
    """What a replay worker's log says it was doing: whether its summary-cache preload (every job waits
    for it) is still running, and its last warning (a produce the broker has not acknowledged, a
    catch-up that is slow: where a stalled run waits)."""
    started = finished = last_warning = None
    for line in log_text.splitlines():
        if not line.startswith("{"):
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        msg = entry.get("msg")
        if msg == "summary cache preload started":
            started, finished = entry, None
        elif msg == "summary cache preloaded":
            finished = entry
        if entry.get("level") in ("warning", "error"):
            last_warning = entry
    if finished is not None:
        preload = (f"summary cache preloaded ({finished.get('entries')} entries in {finished.get('seconds')} s, "
                   f"{finished.get('given_up', 0)} partitions given up)")  # fmt: skip
    elif started is not None:
        preload = f"summary cache preload still running (started {started.get('ts')}; jobs wait for it)"
    else:
        preload = "summary cache preload not started"
    if last_warning is None:
        return f"{preload}, no warning"
    fields = {k: v for k, v in last_warning.items() if k not in ("msg", "level", "logger")}
    detail = ", ".join(f"{k}={v}" for k, v in fields.items())
    return f"{preload}, last warning: {last_warning.get('msg')} ({detail})"[: len(preload) + warning_chars]


def settled(committed_events: int, total_events: int, unanswered: int) -> bool:
    """Whether a replay's group is done: it committed every event of the topic (an empty topic:
    none) and every job and summary the run wrote."""
    return unanswered == 0 and committed_events == total_events


def progress_line(done: int, total: int, elapsed: float, summaries: int, width: int = 24) -> str:
    """``[####....] 1,200/5,000 events 400/s, lag 3,800, ETA 9s, summaries 12``."""
    rate = done / elapsed if elapsed > 0 else 0.0
    lag = max(0, total - done)
    filled = int(width * done / total) if total else width
    eta = f"{lag / rate:,.0f}s" if rate > 0 else "?"
    return (
        f"[{'#' * filled}{'.' * (width - filled)}] {done:,}/{total:,} events {rate:,.0f}/s, lag {lag:,}, "
        f"ETA {eta if lag else '0s'}, summaries {summaries:,}   "
    )


DRY_RUN_PRELOAD_S = 3600.0
"""How long a dry run reads the summaries topics into its cache at most."""


def _dry_run(settings: Settings, specs: tuple[str, ...]) -> None:
    from streams.app.cache import SummaryCache
    from streams.app.factory import session_filter
    from streams.app.inprocess import InProcessReplay
    from streams.rules.policy import policies_from_settings
    from streams.summarizer import build_summarizer
    from streams.summarizer.factory import build_model

    cache = SummaryCache(max_entries=10_000_000)
    records = asyncio.run(_read_log(settings, cache))
    policies = policies_from_settings(
        settings.summary, settings.llm.model, model_context_window=settings.llm.context_window
    )
    model = build_model(settings.llm)
    built: dict[str, object] = {}

    def summarizer_for(app: str) -> object:
        if app not in built:
            built[app] = build_summarizer(settings, app_name=app, model=model)
        return built[app]

    engine = InProcessReplay(
        policies, summarizer_for,  # type: ignore[arg-type]
        cache, dry_run=True, accept=session_filter(set(specs)) if specs else None,
        max_record_bytes=settings.kafka.max_record_bytes,
    )  # fmt: skip
    stats = asyncio.run(engine.run(records, settings.topics.events))
    click.echo(
        f"dry run: {stats.events} events, {stats.keys} keys, {stats.jobs} boundaries to summarize: "
        f"{stats.cache_hits} cache hits, {stats.llm_calls} LLM calls"
    )


async def _read_log(settings: Settings, cache: object) -> list[tuple[int, int, bytes, bytes]]:
    """Every record of the events topic (in offset order per partition), and the cache filled."""
    from streams.app.factory import preload_summaries
    from streams.clients.topic_reader import read_to_end

    # Every summary: the dry run counts what the cache answers (a worker bounds its preload, this reads on).
    await preload_summaries(settings, settings.topics.summaries, "", cache,  # type: ignore[arg-type]
                            timeout_s=DRY_RUN_PRELOAD_S)  # fmt: skip
    records = await read_to_end(settings.kafka, settings.topics.events, settings.topics.partitions)
    out = [(m.partition, m.offset, m.key or b"", m.value) for m in records if m.value is not None]
    # Sessions are independent and a session lives in one partition: partition by partition is log order.
    out.sort(key=lambda r: (r[0], r[1]))
    return out


MODEL_CALLS = "model_calls"
"""The key of :func:`_outcomes` counting the run's calls to the model: a summary may take more than one
(an empty answer asked again, a ``max_summary_length`` rewrite, the calls of attempts that failed), and a
job given up took its attempts' calls."""


def _outcomes(log_paths: list[Path]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for log_path in log_paths:
        for line in log_path.read_text(errors="replace").splitlines():
            if '"summary made"' in line:
                made = json.loads(line)
                outcome = made.get("outcome", "?")
                counts[outcome] = counts.get(outcome, 0) + 1
                # An older worker's line has no count: one call per summary the model made.
                calls = made.get("model_calls", 1 if outcome == "summary" else 0)
                counts[MODEL_CALLS] = counts.get(MODEL_CALLS, 0) + calls
            elif '"summary job given up"' in line:  # its attempts' calls were made all the same
                counts[MODEL_CALLS] = counts.get(MODEL_CALLS, 0) + json.loads(line).get("model_calls", 0)
    return counts
