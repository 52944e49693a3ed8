"""``distill projector``: materialize events and summaries into Cassandra (its own process, scalable by group)."""

from __future__ import annotations

import asyncio
import signal

import click

from projections.embedding import Embedder
from schemas.settings import Settings, load_settings
from streams.cassandra_connection import cassandra_session
from streams.logging_setup import setup_logging


def _build_embedder(settings: Settings) -> Embedder | None:
    if not settings.embedder.configured:
        return None
    from streams.embedder_openai import OpenAIEmbedder

    return OpenAIEmbedder(settings.embedder)


async def _run(settings: Settings, group: str, max_batch: int) -> None:
    from projections.kafka_runner import ProjectorRunner
    from projections.projector import Projector
    from streams.kafka_config import consumer_kwargs, producer_kwargs
    from streams.rules.tokens import get_token_counter

    with cassandra_session(settings.cassandra) as session:
        projector = Projector(
            session,
            settings.cassandra.keyspace,
            events_topic=settings.topics.events,
            summaries_topic=settings.topics.summaries,
            consumer_group=group,
            count_tokens=get_token_counter().count_message,
            embedder=_build_embedder(settings),
        )
        runner = ProjectorRunner(
            projector,
            dead_letter_topic=settings.topics.dead_letters,
            consumer_kwargs=consumer_kwargs(settings.kafka),
            producer_kwargs=producer_kwargs(settings.kafka),
            max_batch=max_batch,
            backoff_max_s=settings.cassandra.reconnect_max_delay_s,
            follow_epochs=True,
        )
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, runner.stop)
        await runner.run()


@click.command("projector")
@click.option("--group", default=None, help="Consumer group (default: <worker.app_id>-projector).")
@click.option("--max-batch", default=2000, show_default=True, help="Records per projected batch.")
def command(group: str | None, max_batch: int) -> None:
    """Consume the events and summaries topics and write them to Cassandra, exactly once in effect."""
    settings = load_settings()
    setup_logging(settings.worker.log_level, settings.worker.log_json)
    asyncio.run(_run(settings, group or f"{settings.worker.app_id}-projector", max_batch))
