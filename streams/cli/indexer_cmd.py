"""``distill indexer``: build the recall index of ``session_search`` from the events topic (its own process)."""

from __future__ import annotations

import asyncio

import click

from schemas.settings import load_settings
from streams.cli.projector_cmd import default_groups, run_stages
from streams.logging_setup import setup_logging


@click.command("indexer")
@click.option("--group", default=None, help="Consumer group (default: <worker.app_id>-indexer).")
@click.option("--max-batch", default=2000, show_default=True, help="Records per indexed batch.")
def command(group: str | None, max_batch: int) -> None:
    """Consume the events topic and write the recall index (documents, chunks, vectors) to Cassandra.

    Runs beside ``distill projector --no-index``, under its own consumer group
    and offsets (stored in Cassandra after the rows, like the projector's):
    search may lag the prompt by this stage's lag (``ContextRead.index_lag``,
    the lag page of ``distill ui``), a prompt never waits for it. Several
    indexers in one group share the partitions.
    """
    settings = load_settings()
    setup_logging(settings.worker.log_level, settings.worker.log_json)
    asyncio.run(run_stages(settings, [("index", group or default_groups(settings)[1])], max_batch))
