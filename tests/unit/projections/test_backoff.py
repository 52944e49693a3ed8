"""The projector resumes soon after Cassandra answers again (issue 12, point 9): capped backoff, fast reconnects."""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any

import pytest

from projections.cassandra_session import open_cluster
from projections.errors import StageBehind, StoreUnavailable
from projections.kafka_runner import ProjectorRunner, next_backoff
from projections.projector import BatchOutcome, SourceRecord
from schemas.settings import CassandraSettings


def test_next_backoff_doubles_then_stays_at_the_cap_with_any_jitter() -> None:
    for factor in (0.9, 1.0, 1.1):
        delay, seen = 0.5, []
        for _ in range(30):
            delay = next_backoff(delay, 2.0, rng=lambda lo, hi, f=factor: f)  # type: ignore[misc]
            seen.append(delay)
        assert max(seen) <= 2.0
        assert seen[-1] == 2.0
    assert next_backoff(0.5, 2.0, rng=lambda lo, hi: 1.0) == 1.0


class _FlakyProjector:
    """Fails ``failures`` times with StoreUnavailable, then succeeds."""

    consumer_group = "g"

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    async def project(self, records: Any, dead_letters: Any, *, save_offsets: Any) -> BatchOutcome:
        self.calls += 1
        if self.calls <= self.failures:
            raise StoreUnavailable("cassandra unavailable: NoHostAvailable")
        return BatchOutcome(events=len(records))


class _Consumer:
    def __init__(self) -> None:
        self.paused = 0
        self.resumed = 0

    def assignment(self) -> set[Any]:
        return set()

    def pause(self, *tps: Any) -> None:
        self.paused += 1

    def resume(self, *tps: Any) -> None:
        self.resumed += 1


def _runner(projector: Any, stop_after_waits: int | None = None) -> tuple[ProjectorRunner, _Consumer, list[float]]:
    """A runner around ``projector`` whose backoff waits are recorded, not slept (``stop()`` after that many)."""
    runner = ProjectorRunner(projector, dead_letter_topic="dl", consumer_kwargs={}, producer_kwargs={})
    consumer = _Consumer()
    runner._consumer = consumer  # type: ignore[assignment]
    waits: list[float] = []

    async def wait(delay: float) -> None:
        waits.append(delay)
        if len(waits) == stop_after_waits:
            runner.stop()  # SIGTERM while the batch waits

    runner._wait = wait  # type: ignore[method-assign]
    return runner, consumer, waits


async def test_retry_backoff_never_exceeds_two_seconds_during_a_long_outage() -> None:
    projector = _FlakyProjector(failures=40)
    runner, consumer, waits = _runner(projector)
    outcome = await runner._project_with_retry([SourceRecord("events", 0, 1, b"k", b"{}")])
    assert outcome is not None and outcome.events == 1 and projector.calls == 41
    assert len(waits) == 40
    # The wait after the outage ends is what delays the resume: never above 2 s (it reached 30.7 s before).
    assert max(waits) <= 2.0, waits
    assert sum(waits) < 40 * 2.0 + 1e-9
    assert consumer.resumed == 1


class _BehindProjector(_FlakyProjector):
    """A stage waiting for another that never comes (the deep index stage behind a stopped primary)."""

    async def project(self, records: Any, dead_letters: Any, *, save_offsets: Any) -> BatchOutcome:
        self.calls += 1
        raise StageBehind("the primary indexer (g-index) is at events[0]@0, this batch reaches 2")


async def test_a_stop_ends_the_retries_of_a_batch_that_waits_for_another_stage() -> None:
    projector = _BehindProjector(failures=0)
    runner, consumer, waits = _runner(projector, stop_after_waits=3)
    outcome = await asyncio.wait_for(runner._project_with_retry([SourceRecord("events", 0, 1, b"k", b"{}")]), 5)
    assert outcome is None  # not projected: its offsets are not stored, the next start reads it again
    assert projector.calls == 4 and len(waits) == 3 and consumer.resumed == 1


def test_driver_reconnects_to_a_downed_host_at_least_every_two_seconds() -> None:
    cluster = open_cluster(CassandraSettings())
    try:
        schedule = list(itertools.islice(cluster.reconnection_policy.new_schedule(), 50))
    finally:
        cluster.shutdown()
    assert len(schedule) == 50  # it never gives up
    assert max(schedule) <= 2.0, schedule[-5:]
    assert schedule[0] <= 0.5


def test_reconnect_cap_is_a_setting() -> None:
    cluster = open_cluster(CassandraSettings(reconnect_max_delay_s=0.5))
    try:
        assert max(itertools.islice(cluster.reconnection_policy.new_schedule(), 20)) <= 0.5
    finally:
        cluster.shutdown()


class _BehindThenCaughtUp(_FlakyProjector):
    """Behind the stage it waits for ``failures`` times, then that stage has caught up."""

    async def project(self, records: Any, dead_letters: Any, *, save_offsets: Any) -> BatchOutcome:
        self.calls += 1
        if self.calls <= self.failures:
            raise StageBehind("the primary indexer (g-index) is at events[0]@0, this batch reaches 2")
        return BatchOutcome(events=len(records))


def _resumed(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if "consumer resumed" in r.getMessage()]


async def test_the_resumption_says_why_the_consumer_was_paused(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    record = [SourceRecord("events", 0, 1, b"k", b"{}")]
    runner, _, _ = _runner(_FlakyProjector(failures=2))
    assert await runner._project_with_retry(record) is not None
    assert _resumed(caplog) == [(logging.INFO, "cassandra reachable again, consumer resumed")]
    caplog.clear()
    runner, _, _ = _runner(_BehindThenCaughtUp(failures=2))  # routine for the deep stage: not said at INFO
    assert await runner._project_with_retry(record) is not None
    assert _resumed(caplog) == [(logging.DEBUG, "the stage waited for caught up, consumer resumed")]
    assert not [r for r in caplog.records if r.levelno >= logging.INFO and "paused" in r.getMessage()]
    caplog.clear()
    runner, _, _ = _runner(_BehindProjector(failures=0), stop_after_waits=1)  # stopped: nothing came back
    assert await runner._project_with_retry(record) is None
    assert _resumed(caplog) == []
