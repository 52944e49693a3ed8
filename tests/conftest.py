"""Shared fixtures. Integration fixtures start the real services when they are not running.

Where the services come from (``DISTILL_TEST_SERVICES``):
- ``auto`` (default): reuse running local services, else testcontainers when a
  Docker engine answers, else start the local JVM services;
- ``local``: always the local JVM services (``distill services``);
- ``docker``: testcontainers (needs a Docker engine);
- ``external``: use the endpoints in the ``DISTILL_*`` settings as they are.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import settings as hypothesis_settings

from schemas.settings import Settings, load_settings
from tests.support.cleanup import REGISTERED, register_prefix
from tests.support.keyspaces import KeyspacePool

# Timings are measured by benchmarks, not asserted by tests: Hypothesis's per-example deadline
# (200 ms) failed a cheap example that a loaded 2-core box paused for 425 ms.
hypothesis_settings.register_profile("distill", deadline=None)
hypothesis_settings.load_profile("distill")


def _delete_registered(settings: Settings) -> None:
    """Delete the topics and consumer groups the tests registered (tests/support/cleanup.py)."""
    if not REGISTERED:
        return
    import asyncio

    from streams.topics_prune import delete_prefixed

    try:
        pruned = asyncio.run(delete_prefixed(settings.kafka, sorted(REGISTERED)))
    except Exception as exc:  # cleaning must not fail the session; `distill topics prune` can finish it
        print(f"\ntest cleanup: topics not deleted ({type(exc).__name__}: {exc})")
        return
    finally:
        REGISTERED.clear()
    print(f"\ntest cleanup: deleted {len(pruned.topics)} topics, {len(pruned.groups)} consumer groups")


def _docker_answers() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=10, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session")
def service_settings() -> Iterator[Settings]:
    """Settings pointing at a running Kafka and Cassandra, started here if needed."""
    mode = os.environ.get("DISTILL_TEST_SERVICES", "auto")
    settings = load_settings()
    if mode == "external":
        try:
            yield settings
        finally:
            _delete_registered(settings)
        return
    from streams.services.manager import LocalServices

    local = LocalServices(settings)
    running = local.kafka.pid() is not None and local.cassandra.pid() is not None
    if mode == "docker" or (mode == "auto" and not running and _docker_answers()):
        from tests.support.containers import docker_services

        with docker_services(settings) as docker_settings:
            try:
                yield docker_settings
            finally:
                _delete_registered(docker_settings)
        return
    started = local.up(lambda line: None)
    try:
        yield settings
    finally:
        _delete_registered(settings)
        local.down(lambda line: None, only={name for name, now in started.items() if now})


@pytest.fixture()
def isolated_settings(service_settings: Settings) -> Settings:
    """Service settings with a fresh keyspace and fresh topic names, for one test."""
    suffix = uuid.uuid4().hex[:8]
    register_prefix(f"t-{suffix}.")
    data = service_settings.model_dump()
    data["cassandra"]["keyspace"] = f"t_{suffix}"
    for name in ("events", "jobs", "summaries", "dead_letters"):
        data["topics"][name] = f"t-{suffix}.{name}"
    data["topics"]["partitions"] = 2
    return Settings(**data)


@pytest.fixture(scope="session")
def keyspaces(service_settings: Settings) -> Iterator[KeyspacePool]:
    """This test process's pool of migrated keyspaces (dropped at the end)."""
    pool = KeyspacePool(service_settings.cassandra)
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture()
def pooled_settings(isolated_settings: Settings, keyspaces: KeyspacePool) -> Iterator[Settings]:
    """``isolated_settings`` on a migrated keyspace with empty tables, emptied again after the test."""
    name = keyspaces.lease()
    data = isolated_settings.model_dump()
    data["cassandra"]["keyspace"] = name
    try:
        yield Settings(**data)
    finally:
        keyspaces.release(name)


# Seconds each of the slowest test files took in a parallel `make test` on this box (rounded). With
# whole files per test process, starting the longest first keeps one long file from running alone
# at the end (longest-processing-time-first scheduling); files not listed keep collection order.
SLOW_FILES = {
    "tests/integration/test_context_read_property.py": 150,
    "tests/unit/summarizer/test_invariant_property.py": 125,
    "tests/integration/test_pipeline_guarantees.py": 115,
    "tests/integration/test_oracle_end_to_end.py": 100,
    "tests/integration/test_replay.py": 100,
    "tests/integration/test_services.py": 90,
    "tests/integration/test_pipeline_timeout.py": 85,
    "tests/integration/test_pipeline_rocksdb.py": 65,
    "tests/integration/test_pipeline_core.py": 60,
    "tests/integration/test_ui_browser.py": 60,
    "tests/integration/test_replay_guards.py": 45,
    "tests/integration/test_example_agent.py": 45,
    "tests/unit/context/test_property.py": 45,
    "tests/integration/test_adapter_trpc.py": 42,
    "tests/integration/test_adapter_lifecycle.py": 40,
    "tests/integration/test_pipeline_failures.py": 40,
    "tests/integration/test_recall_indexer.py": 35,
    "tests/integration/test_adapter_openai_agents.py": 33,
    "tests/integration/test_projections_kafka.py": 32,
    "tests/integration/test_pipeline_sync.py": 25,
}


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    root = config.rootpath

    def weight(item: pytest.Item) -> int:
        return SLOW_FILES.get(item.path.relative_to(root).as_posix(), 0)

    items.sort(key=weight, reverse=True)  # stable: a file's tests keep their order
