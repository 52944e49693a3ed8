"""A worker and a projector on topics of their own, for the adapter examples.

``isolated_pipeline(settings)`` gives the example fresh topic names and a fresh
worker app id (so it never shares a consumer group with another worker),
creates the topics and tables, and runs ``distill worker`` + ``distill
projector`` with exactly those settings until the block ends.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from schemas.settings import Settings
from streams.clients.cassandra_connection import cassandra_session
from streams.services.local_pipeline import LocalPipeline


def isolated(settings: Settings, name: str) -> Settings:
    """``settings`` with topics and a worker app id of their own."""
    data = settings.model_dump()
    suffix = uuid.uuid4().hex[:8]
    for topic in ("events", "jobs", "summaries", "dead_letters"):
        data["topics"][topic] = f"{name}-{suffix}.{topic}"
    data["worker"]["app_id"] = f"{name}-{suffix}"
    data["llm"]["api_key"] = settings.llm.api_key
    return Settings(**data)


def child_env(settings: Settings) -> dict[str, str]:
    """Environment that makes a ``distill`` subprocess load exactly ``settings``."""
    env = {f"DISTILL_{s.upper()}": getattr(settings, s).model_dump_json()
           for s in ("kafka", "cassandra", "topics", "summary", "worker")}  # fmt: skip
    llm = settings.llm.model_dump(mode="json")
    llm["api_key"] = settings.llm.api_key.get_secret_value() if settings.llm.api_key else None
    env["DISTILL_LLM"] = json.dumps(llm)
    return env


@contextmanager
def isolated_pipeline(settings: Settings, workdir: Path) -> Iterator[Settings]:
    """Topics, tables, a worker and a projector for ``settings`` (already isolated); stopped on exit.

    On exit the run's topics and consumer groups (every name starting with its worker app id:
    its four topics, the track-state changelog, the worker's, projector's and indexer's groups)
    are deleted, so running an example again and again leaves nothing on the broker.
    """
    from projections.migrations import apply_migrations
    from streams.clients.topics_admin import ensure_topics
    from streams.clients.topics_prune import delete_prefixed

    try:
        asyncio.run(ensure_topics(settings))
        with cassandra_session(settings.cassandra) as session:
            apply_migrations(session, settings.cassandra)
        with LocalPipeline(workdir, env=child_env(settings)) as pipeline:
            pipeline.wait_for_worker(120)
            yield settings
    finally:
        asyncio.run(delete_prefixed(settings.kafka, [settings.worker.app_id]))


def run_with_pipeline(
    name: str, app_name: str, overrides: dict[str, object], flow: Callable[[], Awaitable[None]]
) -> None:
    """Run ``flow()`` with a fresh worker + projector whose settings give ``app_name`` these summary overrides.

    The local Kafka and Cassandra are started (or reused); the ``DISTILL_*``
    environment of this process is set to the isolated settings, so anything
    ``flow`` builds with :func:`schemas.settings.load_settings` talks to them.
    """
    import os

    from schemas.settings import load_settings
    from streams.adapters.trpc_settings import with_app_overrides
    from streams.services.manager import LocalServices

    base = load_settings()
    LocalServices(base).up(print)
    settings = with_app_overrides(isolated(base, name), app_name, dict(overrides))
    with isolated_pipeline(settings, Path(".distill") / name):
        os.environ.update(child_env(settings))
        asyncio.run(flow())
