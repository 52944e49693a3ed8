"""``distill projector``: materialize events and summaries into Cassandra (its own process, scalable by group).

Three stages, each its own consumer group with its own offsets in Cassandra:
the projector writes what the next prompt needs (events, summaries, the
hidden-history windows), the recall indexer builds the ``session_search``
index, and the indexer's deep stage adds the later chunks of long documents
behind it (``projections.indexer``). By default one process runs all three
(nothing a user starts loses search); ``--no-index`` runs the projector
alone, for deployments that run ``distill indexer`` (and ``distill indexer
--deep``) processes of their own; ``--no-deep`` leaves the deep stage to those.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

from projections.embedding import Embedder
from schemas.settings import Settings, load_settings
from streams.clients.cassandra_connection import cassandra_session
from streams.logging_setup import setup_logging

if TYPE_CHECKING:
    from cassandra.cluster import Session

    from projections.kafka_runner import ProjectorRunner
    from projections.stage import Stage


def default_groups(settings: Settings) -> tuple[str, str]:
    """The consumer groups of the projector and of the indexer: ``<worker.app_id>-projector`` / ``-indexer``."""
    return f"{settings.worker.app_id}-projector", f"{settings.worker.app_id}-indexer"


def index_group_of(project_group: str) -> str:
    """The indexer's group beside the projector group ``project_group``: ``<name>-projector`` → ``<name>-indexer``.

    One rule for the default and an explicit ``--group``, so ``distill projector
    --group acme-projector`` and ``distill indexer`` (default ``acme-indexer``)
    share one index group: two groups would each index every event (the
    index is the stage's dominant Cassandra cost) although the rows agree.
    """
    return project_group.removesuffix("-projector") + "-indexer"


def _build_embedder(settings: Settings) -> Embedder | None:
    if not settings.embedder.configured:
        return None
    from streams.clients.embedder_openai import OpenAIEmbedder

    return OpenAIEmbedder(settings.embedder)


def _runner(settings: Settings, stage: Stage, max_batch: int, *, follow_epochs: bool = False) -> ProjectorRunner:
    from projections.kafka_runner import ProjectorRunner
    from streams.clients.kafka_config import consumer_kwargs, producer_kwargs

    return ProjectorRunner(
        stage,
        dead_letter_topic=settings.topics.dead_letters,
        consumer_kwargs=consumer_kwargs(settings.kafka),
        producer_kwargs=producer_kwargs(settings.kafka),
        max_batch=max_batch,
        backoff_max_s=settings.cassandra.reconnect_max_delay_s,
        follow_epochs=follow_epochs,
    )


def projector_runner(settings: Settings, session: Session, group: str, max_batch: int) -> ProjectorRunner:
    """The critical-path stage (``projections.projector``) under ``group``."""
    from projections.projector import Projector
    from streams.rules.tokens import get_token_counter

    projector = Projector(
        session,
        settings.cassandra.keyspace,
        events_topic=settings.topics.events,
        summaries_topic=settings.topics.summaries,
        consumer_group=group,
        count_tokens=get_token_counter().count_message,
        max_record_bytes=settings.kafka.max_record_bytes,
    )
    return _runner(settings, projector, max_batch, follow_epochs=True)  # the replays' summaries too


def indexer_runner(settings: Settings, session: Session, group: str, max_batch: int) -> ProjectorRunner:
    """The recall-index stage (``projections.indexer``, its primary scope) under ``group``."""
    from projections.critical_gate import CriticalPathGate
    from projections.indexer import RecallIndexer

    indexer = RecallIndexer(
        session,
        settings.cassandra.keyspace,
        events_topic=settings.topics.events,
        consumer_group=group,
        embedder=_build_embedder(settings),
        gate=CriticalPathGate(session, settings.cassandra.keyspace),  # the critical path first
        scope="primary",
        primary_chunks=settings.index.primary_chunks,
        max_record_bytes=settings.kafka.max_record_bytes,
    )
    return _runner(settings, indexer, max_batch)


def deep_indexer_runner(settings: Settings, session: Session, group: str, max_batch: int) -> ProjectorRunner:
    """The recall index's deep stage under ``group`` (``<index group>-deep``), following the index group and
    yielding to it while it is behind."""
    from projections.indexer import RecallIndexer, primary_gate

    ks = settings.cassandra.keyspace
    gate = primary_gate(session, ks)  # the primary stage first
    indexer = RecallIndexer(session, ks, events_topic=settings.topics.events, consumer_group=group, scope="deep",
                            primary_chunks=settings.index.primary_chunks, gate=gate,
                            max_record_bytes=settings.kafka.max_record_bytes)  # fmt: skip
    return _runner(settings, indexer, max_batch)


async def run_stages(settings: Settings, stages: Sequence[tuple[str, str]], max_batch: int) -> None:
    """Run ``(stage, group)`` pairs (``project`` / ``index`` / ``index-deep``) in this process until SIGTERM or
    SIGINT."""
    builders = {"project": projector_runner, "index": indexer_runner, "index-deep": deep_indexer_runner}
    with cassandra_session(settings.cassandra) as session:
        runners = [builders[stage](settings, session, group, max_batch) for stage, group in stages]

        def stop() -> None:
            for r in runners:
                r.stop()

        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop)
        tasks = [asyncio.ensure_future(r.run()) for r in runners]
        try:
            # One stage failing stops the process (its supervisor restarts it): never run half the pipeline.
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                task.result()
        finally:
            stop()
            await asyncio.gather(*tasks, return_exceptions=True)


@click.command("projector")
@click.option("--group", default=None, help="Consumer group (default: <worker.app_id>-projector).")
@click.option("--index/--no-index", default=True, show_default=True,
              help="Also run the recall indexer in this process (its own consumer group).")  # fmt: skip
@click.option(
    "--index-group",
    default=None,
    help="The indexer's consumer group (default: the projector's group with -projector replaced by -indexer, "
    "else <group>-indexer).",
)
@click.option("--deep/--no-deep", default=True, show_default=True,
              help="With --index: also run the indexer's deep stage (the later chunks of long documents; group "
                   "<index group>-deep) in this process.")  # fmt: skip
@click.option("--max-batch", default=2000, show_default=True, help="Records per projected batch.")
def command(group: str | None, index: bool, index_group: str | None, deep: bool, max_batch: int) -> None:
    """Consume the events and summaries topics and write them to Cassandra, exactly once in effect.

    With ``--index`` (the default) the recall index of ``session_search`` is
    built in the same process by a second consumer (``distill indexer``) and,
    with ``--deep`` (the default), the later chunks of long documents by a
    third (``distill indexer --deep``), which follows the second and reports
    its own lag (``ContextRead.deep_index_lag``). ``--no-index`` leaves both
    to separately run ``distill indexer`` processes, ``--no-deep`` the third.
    """
    settings = load_settings()
    setup_logging(settings.worker.log_level, settings.worker.log_json)
    project_group = group or default_groups(settings)[0]
    stages = [("project", project_group)]
    from projections.indexer import deep_group_of

    if index:  # a group of one's own for the projector means one for its indexer too
        indexing = index_group or index_group_of(project_group)
        stages.append(("index", indexing))
        if deep:
            stages.append(("index-deep", deep_group_of(indexing)))
    asyncio.run(run_stages(settings, stages, max_batch))
