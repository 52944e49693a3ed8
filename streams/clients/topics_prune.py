"""Deleting the topics and consumer groups of test and benchmark runs (``distill topics prune``).

Tests and benchmarks create topics with a per-run name (``t-<suffix>.events``,
``bench-<suffix>.jobs``), and each worker they start makes its own consumer
group and internal topics named after its ``app_id`` (``distill-test-<suffix>``,
``<app_id>-track-state-changelog``, ``<app_id>-__assignor-__leader``). Left on
the broker, they pile up by the hundred. :func:`prune` deletes every topic and
consumer group whose name starts with one of the given prefixes.

A prefix must be at least :data:`MIN_PREFIX` characters and may not be a
prefix of the live topics or the live worker's group (``prune`` refuses it
with :class:`~streams.errors.ConfigurationError`): it is a cleaning tool, not
a way to wipe the deployment.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError
from aiokafka.protocol.admin import DeleteGroupsRequest

from schemas.settings import KafkaSettings, Settings
from streams.clients.kafka_config import common_kwargs
from streams.errors import ConfigurationError, ServiceError

MIN_PREFIX = 2
"""Shortest prefix accepted (an empty or one-letter prefix matches nearly everything)."""


@dataclass
class Pruned:
    """What :func:`prune` deleted (or, with ``dry_run``, would delete)."""

    topics: list[str] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    """Group or topic → the broker's error, for those it refused to delete (e.g. a group with members)."""


def matching(names: Iterable[str], prefixes: Iterable[str]) -> list[str]:
    """The ``names`` starting with one of ``prefixes``, sorted."""
    wanted = tuple(prefixes)
    return sorted(n for n in names if n.startswith(wanted))


def check_prefixes(prefixes: Iterable[str], settings: Settings) -> tuple[str, ...]:
    """The prefixes, or :class:`ConfigurationError` when one is too short or covers a live name."""
    out = tuple(prefixes)
    if not out:
        raise ConfigurationError("topics prune needs at least one --prefix")
    t = settings.topics
    live = (t.events, t.jobs, t.summaries, t.dead_letters, settings.worker.app_id)
    for p in out:
        if len(p) < MIN_PREFIX:
            raise ConfigurationError(f"prefix {p!r} is shorter than {MIN_PREFIX} characters")
        covered = [n for n in live if n.startswith(p)]
        if covered:
            raise ConfigurationError(f"prefix {p!r} matches the configured {covered[0]!r}: refusing to delete it")
    return out


async def prune(settings: Settings, prefixes: Iterable[str], *, dry_run: bool = False) -> Pruned:
    """Delete every topic and consumer group named ``<prefix>...`` (prefixes checked, see the module)."""
    return await delete_prefixed(settings.kafka, check_prefixes(prefixes, settings), dry_run=dry_run)


async def delete_prefixed(kafka: KafkaSettings, prefixes: Iterable[str], *, dry_run: bool = False) -> Pruned:
    """Delete every topic and consumer group named ``<prefix>...``, prefixes unchecked (a run's own names)."""
    wanted = tuple(prefixes)
    if not wanted or not all(wanted):
        raise ConfigurationError("delete_prefixed needs non-empty prefixes")
    admin = AIOKafkaAdminClient(**common_kwargs(kafka))
    try:
        await admin.start()
        out = Pruned(
            topics=matching(await admin.list_topics(), wanted),
            groups=matching((g[0] for g in await admin.list_consumer_groups()), wanted),
        )
        if dry_run:
            return out
        if out.groups:
            out.failed.update(await _delete_groups(admin, out.groups))
            out.groups = [g for g in out.groups if g not in out.failed]
        if out.topics:
            await admin.delete_topics(out.topics)
        return out
    except KafkaError as exc:
        raise ServiceError(f"kafka at {kafka.bootstrap_servers}: {exc}") from exc
    finally:
        await admin.close()


async def _delete_groups(admin: AIOKafkaAdminClient, groups: list[str]) -> dict[str, str]:
    """Delete ``groups`` at their coordinators; returns ``{group: error}`` for the refused ones."""
    by_node: dict[int, list[str]] = {}
    for group in groups:
        by_node.setdefault(await admin.find_coordinator(group), []).append(group)
    failed: dict[str, str] = {}
    for node, names in by_node.items():
        response = await admin._send_request_to_node(node, DeleteGroupsRequest(names))
        for group, code in response.results:
            if code:
                failed[group] = f"error code {code}"
    return failed
