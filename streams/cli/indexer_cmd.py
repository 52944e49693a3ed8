"""``distill indexer``: build the recall index of ``session_search`` from the events topic (its own process)."""

from __future__ import annotations

import asyncio

import click

from schemas.settings import load_settings
from streams.cli.projector_cmd import default_groups, run_stages
from streams.logging_setup import setup_logging


@click.command("indexer")
@click.option("--group", default=None, help="The indexer's consumer group (default: <worker.app_id>-indexer); "
              "the deep stage runs under <group>-deep.")  # fmt: skip
@click.option("--deep", is_flag=True, default=False,
              help="Run the deep stage (the later chunks of long documents) instead of the primary one.")  # fmt: skip
@click.option("--max-batch", default=2000, show_default=True, help="Records per indexed batch.")
def command(group: str | None, deep: bool, max_batch: int) -> None:
    """Consume the events topic and write the recall index (documents, chunks, vectors) to Cassandra.

    Runs beside ``distill projector --no-index``, under its own consumer group
    and offsets (stored in Cassandra after the rows, like the projector's):
    search may lag the prompt by this stage's lag (``ContextRead.index_lag``,
    the lag page of ``distill ui``), a prompt never waits for it. Several
    indexers in one group share the partitions.

    It writes everything but the later chunks of long documents (beyond the
    first 8 Ki characters): ``--deep`` runs the stage that writes those, under
    ``<group>-deep``, behind the indexer of ``<group>`` (it waits for it);
    its lag is ``ContextRead.deep_index_lag``, how long a detail deep in a
    large tool result may take to be found.
    """
    from projections.indexer import deep_group_of

    settings = load_settings()
    setup_logging(settings.worker.log_level, settings.worker.log_json)
    index_group = group or default_groups(settings)[1]
    stage = ("index-deep", deep_group_of(index_group)) if deep else ("index", index_group)
    asyncio.run(run_stages(settings, [stage], max_batch))
