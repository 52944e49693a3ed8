"""``distill dead-letters list | redrive``: inspect the dead-letters topic and publish its records again."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import click

from schemas.dead_letter import DeadLetter
from schemas.settings import Settings, load_settings
from streams.rules.dead_letters import (
    Redrive,
    RedrivePlan,
    Selection,
    SourceCoordinates,
    StoredRecord,
    format_invalid,
    format_line,
    format_refusal,
    format_summary,
    parse_offset,
    parse_since,
    plan_redrive,
    read_stored,
    source_of,
)


@click.group("dead-letters")
def command() -> None:
    """Inspect the dead-letters topic and redrive its records to their source topic.

    A dead letter is a record distill could not process (undecodable, invalid,
    too large, failed for good), kept with its coordinates and the reason.
    """


def _since(ctx: click.Context, param: click.Parameter, value: str | None) -> datetime | None:
    try:
        return parse_since(value, datetime.now(UTC)) if value else None
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _offsets(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> frozenset[SourceCoordinates]:
    try:
        return frozenset(parse_offset(v) for v in values)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def selection_options(f: Callable[..., None]) -> Callable[..., None]:
    """The filters shared by ``list`` and ``redrive`` (repeated values are alternatives, filters combine)."""
    options = [
        click.option("--error-class", "error_classes", multiple=True, metavar="X",
                     help="Only this error class (repeatable)."),
        click.option("--source-topic", default=None, metavar="T", help="Only records that failed from this topic."),
        click.option("--stage", default=None, metavar="S", help="Only this stage (track, summarize, project)."),
        click.option("--since", default=None, callback=_since, metavar="2h|ISO",
                     help="Only failures at or after this time: a duration back (45s, 30m, 2h, 7d, 1w) or ISO 8601."),
        click.option("--offset", "offsets", multiple=True, callback=_offsets, metavar="TOPIC:PARTITION:OFFSET",
                     help="Only the dead letter of this source record (repeatable); T/P/O as printed works too."),
        click.option("--limit", type=click.IntRange(min=1), default=None, help="At most N dead letters, oldest first."),
    ]  # fmt: skip
    for option in reversed(options):
        f = option(f)
    return f


def _selection(params: dict[str, Any]) -> Selection:
    return Selection(
        error_classes=frozenset(params["error_classes"]), source_topic=params["source_topic"], stage=params["stage"],
        since=params["since"], offsets=params["offsets"], limit=params["limit"],
    )  # fmt: skip


@dataclass
class _Tally:
    letters: list[DeadLetter] = field(default_factory=list)
    invalid: int = 0


@command.command("list")
@selection_options
@click.option(
    "--json", "as_json", is_flag=True, help="Print each full DeadLetter record (payload included) as a JSON line."
)
@click.option("--follow", is_flag=True, help="Keep printing new dead letters after the current end (Ctrl-C to stop).")
def list_command(as_json: bool, follow: bool, **params: Any) -> None:
    """Print the dead letters from the start of the topic to its current end.

    One line each: failure time, source topic/partition/offset, stage, error
    class, reason (one line) and the original value size. Payloads are never
    printed except with --json. Records of the topic that are not valid dead
    letters are reported with their coordinates. A summary by error class ends
    the listing (on stderr with --json).
    """
    settings = load_settings()
    selection = _selection(params)
    tally = _Tally()

    async def run() -> None:
        stop = asyncio.Event()
        if follow:
            # Ctrl-C ends the follow loop here, within a fetch timeout. (Cancelling the task, as
            # asyncio.run does on SIGINT, can be swallowed inside the Kafka client's fetch: the
            # listing then never ended and its summary was never printed.)
            def on_sigint() -> None:
                if stop.is_set():  # a second Ctrl-C: stop now
                    raise KeyboardInterrupt
                stop.set()

            with contextlib.suppress(NotImplementedError, RuntimeError):
                asyncio.get_running_loop().add_signal_handler(signal.SIGINT, on_sigint)
        async for batch in stored_batches(settings, follow, stop):
            _report_invalid(settings, batch, tally, as_json)
            remaining = None if selection.limit is None else selection.limit - len(tally.letters)
            for letter in replace(selection, limit=remaining).apply(r.letter for r in batch if r.letter):
                click.echo(
                    json.dumps(letter.model_dump(mode="json"), ensure_ascii=False) if as_json else format_line(letter)
                )
                tally.letters.append(letter)
            if selection.limit is not None and len(tally.letters) >= selection.limit:
                return

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())
    click.echo(format_summary(tally.letters, tally.invalid), err=as_json)


def _report_invalid(settings: Settings, batch: list[StoredRecord], tally: _Tally, as_json: bool) -> None:
    for record in batch:
        if record.letter is None:
            tally.invalid += 1
            click.echo(format_invalid(settings.topics.dead_letters, record), err=as_json)


@command.command("redrive")
@selection_options
@click.option("--all", "everything", is_flag=True, help="Select every dead letter (needed when no filter is given).")
@click.option("--dry-run", is_flag=True, help="Only print what would be published.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def redrive_command(everything: bool, dry_run: bool, yes: bool, **params: Any) -> None:
    """Publish the original key and value bytes of the selected dead letters to their source topic.

    Only the topics distill consumes (events and summaries) are accepted; a
    selection holding another source topic is refused before anything is sent.
    Each record carries the header distill-redrive-of = TOPIC/PARTITION/OFFSET
    of the dead-lettered record. A dead letter whose stored value was truncated
    cannot be redriven and is skipped. The producer is idempotent.

    Redriving the same dead letter twice publishes it twice: consumers treat it
    like any re-sent record. A record rejected for its content is rejected
    again unless the cause was fixed (a raised size limit, a fixed bug, ...).
    A RecordKeyError (no key, or not the key and partition the session's first
    record fixed; the worker and the projector each leave one) is refused again
    with its original key: publish its value with the session's key instead.
    An EventIdReused (an event id the session's log already holds with other
    content) is refused again: publish its content under a new event id.
    """
    selection = _selection(params)
    if not selection.has_filter and not everything:
        raise click.UsageError(
            "select dead letters (--error-class, --source-topic, --stage, --since, --offset) or pass --all"
        )
    settings = load_settings()
    allowed = (settings.topics.events, settings.topics.summaries)
    tally = _Tally()
    asyncio.run(_collect(settings, selection, tally))
    plan = plan_redrive(tally.letters, allowed)
    if plan.foreign:
        raise click.ClickException(format_refusal(plan.foreign, allowed))
    _print_plan(plan, selection, tally)
    if dry_run:
        click.echo("dry run: nothing published")
        return
    if plan.publish:
        if not yes:
            click.confirm(f"publish {len(plan.publish)} record(s) again?", abort=True)
        for redrive, (topic, partition, offset) in zip(plan.publish, _run_publish(settings, plan), strict=True):
            click.echo(f"redriven {source_of(redrive.letter)} → {topic}/{partition}/{offset}")
    click.echo(f"done: {len(plan.publish)} redriven, {_skipped(plan)}")


def _print_plan(plan: RedrivePlan, selection: Selection, tally: _Tally) -> None:
    for redrive in plan.publish:
        click.echo(f"redrive  {format_line(redrive.letter)}")
    for letter, reason in plan.skipped:
        click.echo(f"skip     {format_line(letter)}\n         skipped: {reason}")
    found = {source_of(x) for x in tally.letters}
    for missing in sorted(selection.offsets - found):
        click.echo(f"no dead letter for {missing.topic}:{missing.partition}:{missing.offset}", err=True)
    if tally.invalid:
        click.echo(f"{tally.invalid} invalid record(s) on the dead-letters topic ignored (see `list`)", err=True)
    topics = Counter(r.topic for r in plan.publish)
    where = ", ".join(f"{n} to {t}" for t, n in sorted(topics.items())) or "nothing to publish"
    click.echo(f"plan: {where}; {_skipped(plan)}")


def _skipped(plan: RedrivePlan) -> str:
    counts = plan.skip_counts()
    detail = ", ".join(f"{reason} {n}" for reason, n in sorted(counts.items()))
    return f"{len(plan.skipped)} skipped" + (f" ({detail})" if detail else "")


async def _collect(settings: Settings, selection: Selection, tally: _Tally) -> None:
    async for batch in stored_batches(settings, follow=False):
        tally.invalid += sum(1 for r in batch if r.letter is None)
        tally.letters.extend(selection.apply(r.letter for r in batch if r.letter))


async def stored_batches(
    settings: Settings, follow: bool, stop: asyncio.Event | None = None
) -> AsyncIterator[list[StoredRecord]]:
    """The dead-letters topic from its beginning: everything up to the current end, then (``follow``) new batches.

    Following ends when ``stop`` is set (checked between fetches of at most a second).
    """
    from aiokafka import AIOKafkaConsumer

    from streams.clients.kafka_config import consumer_kwargs

    consumer = AIOKafkaConsumer(**consumer_kwargs(settings.kafka), group_id=None, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = await _assign_all(consumer, settings.topics.dead_letters)
        ends = await consumer.end_offsets(tps)
        backlog: list[StoredRecord] = []
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            backlog.extend(_decode(await consumer.getmany(*tps, timeout_ms=500)))
        yield backlog
        while follow and not (stop is not None and stop.is_set()):
            yield _decode(await consumer.getmany(timeout_ms=1000))
    finally:
        await consumer.stop()


async def _assign_all(consumer: Any, topic: str) -> list[Any]:
    from aiokafka import TopicPartition

    from streams.errors import DistillError

    for _ in range(30):
        partitions = consumer.partitions_for_topic(topic)
        if partitions:
            tps = [TopicPartition(topic, p) for p in sorted(partitions)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            return tps
        await consumer._client.force_metadata_update()
        await asyncio.sleep(0.1)
    raise DistillError(f"topic {topic} not found (run 'distill init')")


def _decode(batch: dict[Any, list[Any]]) -> list[StoredRecord]:
    return [read_stored(m.partition, m.offset, m.value) for msgs in batch.values() for m in msgs]


def _run_publish(settings: Settings, plan: RedrivePlan) -> list[tuple[str, int, int]]:
    return asyncio.run(publish_redrives(settings, plan.publish))


async def publish_redrives(settings: Settings, records: list[Redrive]) -> list[tuple[str, int, int]]:
    """Send ``records`` with an idempotent producer (pipelined); returns where each landed."""
    from aiokafka import AIOKafkaProducer

    from streams.clients.kafka_config import producer_kwargs

    producer = AIOKafkaProducer(**producer_kwargs(settings.kafka))
    await producer.start()
    try:
        futures = [await producer.send(r.topic, r.value, key=r.key, headers=r.headers) for r in records]
        return [(md.topic, md.partition, md.offset) for md in [await f for f in futures]]
    finally:
        await producer.stop()
