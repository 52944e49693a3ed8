"""Shared fixtures. Integration fixtures start the real services when they are not running.

Where the services come from (``DISTILL_TEST_SERVICES``):
- ``auto`` (default): reuse running local services, else testcontainers when a
  Docker engine answers, else start the local JVM services;
- ``local``: always the local JVM services (``distill services``);
- ``docker``: testcontainers (needs a Docker engine);
- ``external``: use the endpoints in the ``DISTILL_*`` settings as they are.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings

from schemas.settings import Settings, load_settings
from tests.support.cleanup import REGISTERED, close_ledger, open_ledger, register_prefix, sweep
from tests.support.keyspaces import KeyspacePool

# Timings are measured by benchmarks, not asserted by tests: Hypothesis's per-example deadline
# (200 ms) failed a cheap example that a loaded 2-core box paused for 425 ms.
hypothesis_settings.register_profile("distill", deadline=None)
hypothesis_settings.load_profile("distill")


def _delete_prefixes(settings: Settings, prefixes: list[str], what: str) -> bool:
    """Delete the topics and consumer groups under ``prefixes``; whether that worked (it never raises)."""
    import asyncio

    from streams.clients.topics_prune import delete_prefixed

    try:
        pruned = asyncio.run(delete_prefixed(settings.kafka, prefixes))
    except Exception as exc:  # cleaning must not fail the session; the next run (or `distill topics prune`) retries
        print(f"\ntest cleanup: {what}: topics not deleted ({type(exc).__name__}: {exc})")
        return False
    print(f"\ntest cleanup: {what}: deleted {len(pruned.topics)} topics, {len(pruned.groups)} consumer groups"
          + (f"; refused: {sorted(pruned.failed)}" if pruned.failed else ""))  # fmt: skip
    return not pruned.failed  # e.g. a killed worker's group still has its member: the next run retries


@contextlib.contextmanager
def _broker_cleanup(settings: Settings) -> Iterator[None]:
    """Delete what dead test runs left on this broker, record this run's prefixes, delete them at the end.

    See tests/support/cleanup.py: the ledgers live in the services' data directory.
    """
    ledgers = settings.services.resolved_data_dir / "test-runs"
    bootstrap = settings.kafka.bootstrap_servers
    sweep(ledgers, bootstrap, lambda prefixes, what: _delete_prefixes(settings, prefixes, what))
    open_ledger(ledgers, bootstrap)
    try:
        yield
    finally:
        if not REGISTERED or _delete_prefixes(settings, sorted(REGISTERED), "this run"):
            close_ledger()  # else the ledger stays: the next run deletes what it names
        REGISTERED.clear()


def _docker_answers() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=10, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--services-ready-file",
        default=None,
        help="a file that `make test` writes (the exit status of `distill services up` + `distill init`, "
        "run beside the suite) once the services are ready; tests that need them wait for it",
    )


def _await_services(ready_file: Path, timeout_s: float = 900.0) -> None:
    """Wait until the background `services up` + `init` of `make test` has finished; fail with its log if it failed.

    The unit tests run meanwhile: on a fresh machine the services' jars are downloaded and
    both JVMs boot in that time.
    """
    deadline = time.monotonic() + timeout_s
    while not ready_file.exists():
        if time.monotonic() > deadline:
            pytest.fail(f"the services were not ready after {timeout_s:.0f} s ({ready_file} not written)")
        time.sleep(0.2)
    status = ready_file.read_text().strip()
    if status != "0":
        log = ready_file.with_suffix(".log")
        tail = log.read_text(errors="replace").strip().splitlines()[-5:] if log.exists() else []
        pytest.fail(f"`distill services up` / `distill init` failed (exit {status}): " + " | ".join(tail))


@pytest.fixture(scope="session")
def service_settings(pytestconfig: pytest.Config) -> Iterator[Settings]:
    """Settings pointing at a running Kafka and Cassandra, started here if needed."""
    ready_file = pytestconfig.getoption("--services-ready-file")
    if ready_file is not None:
        _await_services(Path(ready_file))
    mode = os.environ.get("DISTILL_TEST_SERVICES", "auto")
    settings = load_settings()
    if mode == "external":
        with _broker_cleanup(settings):
            yield settings
        return
    from streams.services.manager import LocalServices

    local = LocalServices(settings)
    running = local.kafka.pid() is not None and local.cassandra.pid() is not None
    if mode == "docker" or (mode == "auto" and not running and _docker_answers()):
        from tests.support.containers import docker_services

        with docker_services(settings) as docker_settings, _broker_cleanup(docker_settings):
            yield docker_settings
        return
    started = local.up(lambda line: None)
    try:
        with _broker_cleanup(settings):
            yield settings
    finally:
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
# at the end (longest-processing-time-first scheduling); `make test` passes --no-loadscope-reorder,
# or pytest-xdist would reorder files by their number of tests. The unit files go first: `make
# test` starts the services beside the suite, and the unit tests need none (see
# --services-ready-file). Files not listed keep collection order, after these.
SLOW_UNIT_FILES = {
    "tests/unit/context/test_property.py": 80,
    "tests/unit/test_quality.py": 45,  # mypy on a fresh clone has no cache
    "tests/unit/summarizer/test_invariant_property.py": 30,
    "tests/unit/rules/test_determinism.py": 18,
    "tests/unit/test_layering.py": 17,
    "tests/unit/rules/test_properties.py": 16,
    "tests/unit/adapters/test_trpc_events.py": 15,
}
SLOW_INTEGRATION_FILES = {
    "tests/integration/test_context_read_property.py": 185,
    "tests/integration/test_pipeline_guarantees.py": 120,
    "tests/integration/test_oracle_end_to_end.py": 113,
    "tests/integration/test_pipeline_timeout.py": 102,
    "tests/integration/test_foundation.py": 100,
    "tests/integration/test_ui_browser.py": 100,
    "tests/integration/test_replay_crash.py": 100,
    "tests/integration/test_recall_indexer.py": 95,
    "tests/integration/test_pipeline_core.py": 95,
    "tests/integration/test_replay.py": 90,
    "tests/integration/test_context_read.py": 90,
    "tests/integration/test_services.py": 80,
    "tests/integration/test_adapter_trpc.py": 67,
    "tests/integration/test_pipeline_rocksdb.py": 60,
    "tests/integration/test_replay_guards.py": 60,
    "tests/integration/test_pipeline_failures.py": 55,
    "tests/integration/test_adapter_lifecycle.py": 50,
    "tests/integration/test_recall_cassandra.py": 50,
    "tests/integration/test_projections_kafka.py": 50,
    "tests/integration/test_example_agent.py": 40,
    "tests/integration/test_adapter_openai_agents.py": 38,
    "tests/integration/test_projections_epochs.py": 30,
    "tests/integration/test_pipeline_sync.py": 30,
}


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    root = config.rootpath

    def order(item: pytest.Item) -> tuple[int, int]:
        path = item.path.relative_to(root).as_posix()
        if path in SLOW_UNIT_FILES:
            return 0, -SLOW_UNIT_FILES[path]
        if path in SLOW_INTEGRATION_FILES:
            return 1, -SLOW_INTEGRATION_FILES[path]
        return 2, 0

    items.sort(key=order)  # stable: a file's tests keep their order
