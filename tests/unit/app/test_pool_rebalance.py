"""The job pool across rebalances and failures: once a drain returns no job of its partitions runs
(cancelled ones included, and ones submitted while it ran), stale records are dropped unacked, an
error escaping a job is reported instead of silently blocking its partition, and giving up on a job
survives Kafka failing meanwhile."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka.errors import KafkaConnectionError

from schemas.settings import Settings
from streams.app.coordinates import Coordinates
from streams.app.pool import JobPool
from streams.app.runtime import Backoff, Topics, WorkerRuntime
from streams.app.track import TrackHandler
from streams.errors import PermanentError
from streams.rules.policy import policies_from_settings
from streams.summarizer import SummarizerLike
from tests.unit.app.test_summarize_handler import job


def _recorder(ran: list[str], name: str, gate: asyncio.Event | None = None) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        if gate is not None:
            await gate.wait()
        ran.append(name)

    return run


async def _forever() -> None:
    await asyncio.Event().wait()


async def test_a_cancelled_job_waiting_behind_its_key_never_runs() -> None:
    pool = JobPool(concurrency=2)
    ran: list[str] = []
    acked: list[int] = []
    await pool.submit("k", 0, 0, _forever, lambda: acked.append(0))
    await pool.submit("k", 0, 1, _recorder(ran, "second"), lambda: acked.append(1))
    await pool.drain({0}, timeout=0.05)
    await asyncio.sleep(0.05)
    assert ran == [] and acked == [] and len(pool) == 0


async def test_a_submit_waiting_for_room_during_a_drain_never_starts() -> None:
    pool = JobPool(concurrency=1, capacity=1)
    ran: list[str] = []
    acked: list[int] = []
    gate = asyncio.Event()
    revoking = False
    await pool.submit("a", 0, 0, _recorder(ran, "first", gate), lambda: acked.append(0))
    blocked = asyncio.ensure_future(
        pool.submit("b", 0, 1, _recorder(ran, "second"), lambda: acked.append(1), valid=lambda: not revoking)
    )
    await asyncio.sleep(0.01)
    assert not blocked.done()  # the agent waits for room
    revoking = True  # the revoke begins: the worker's validity check refuses the revoked assignment
    drain = asyncio.ensure_future(pool.drain({0}, timeout=1.0))
    await asyncio.sleep(0.01)
    gate.set()  # the first job finishes within the drain: room for the waiting submit
    await drain
    assert await blocked is False
    await asyncio.sleep(0.05)
    assert ran == ["first"] and acked == [0] and len(pool) == 0


async def test_a_submit_waiting_for_room_freed_by_a_drain_cancelling_never_starts() -> None:
    pool = JobPool(concurrency=1, capacity=1)
    ran: list[str] = []
    revoking = False
    await pool.submit("a", 0, 0, _forever, lambda: None)
    blocked = asyncio.ensure_future(pool.submit("b", 0, 1, _recorder(ran, "second"), lambda: None,
                                                valid=lambda: not revoking))  # fmt: skip
    await asyncio.sleep(0.01)
    revoking = True
    await pool.drain({0}, timeout=0.05)
    assert await blocked is False
    await asyncio.sleep(0.05)
    assert ran == [] and len(pool) == 0


async def test_a_stale_record_is_dropped_unacked_and_frees_its_room() -> None:
    pool = JobPool(concurrency=1, capacity=1)
    ran: list[str] = []
    acked: list[int] = []
    assert await pool.submit("a", 0, 0, _recorder(ran, "stale"), lambda: acked.append(0), valid=lambda: False) is False
    assert await pool.submit("a", 0, 1, _recorder(ran, "fresh"), lambda: acked.append(1), valid=lambda: True) is True
    await pool.drain({0})
    assert ran == ["fresh"] and acked == [1]


async def test_validity_is_checked_once_there_is_room() -> None:
    pool = JobPool(concurrency=1, capacity=1)
    ran: list[str] = []
    generation = {"now": 1}
    gate = asyncio.Event()
    await pool.submit("a", 0, 0, _recorder(ran, "first", gate), lambda: None)
    blocked = asyncio.ensure_future(
        pool.submit("b", 1, 0, _recorder(ran, "second"), lambda: None, valid=lambda: generation["now"] == 1)
    )
    await asyncio.sleep(0.01)
    generation["now"] = 2  # a rebalance happened while the agent waited
    gate.set()
    assert await blocked is False
    await pool.drain(None)
    assert ran == ["first"]


async def test_a_job_that_starts_during_a_drain_is_waited_for_too() -> None:
    pool = JobPool(concurrency=1, capacity=1)
    ran: list[str] = []
    first, second = asyncio.Event(), asyncio.Event()
    await pool.submit("a", 0, 0, _recorder(ran, "first", first), lambda: None)
    blocked = asyncio.ensure_future(pool.submit("b", 0, 1, _recorder(ran, "second", second), lambda: None))
    drain = asyncio.ensure_future(pool.drain({0}, timeout=1.0))
    await asyncio.sleep(0.01)
    first.set()  # "first" ends inside the drain; "second" gets its room and starts
    assert await blocked is True
    await asyncio.sleep(0.05)
    assert not drain.done()  # "second" is still running: the drain waits for it too
    second.set()
    await drain
    assert ran == ["first", "second"] and len(pool) == 0


async def test_a_drain_is_bounded_by_a_job_ignoring_cancellation() -> None:
    pool = JobPool(concurrency=1)
    released = asyncio.Event()

    async def stubborn() -> None:
        while not released.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(0.01)

    await pool.submit("a", 0, 0, stubborn, lambda: None)
    started = time.monotonic()
    await pool.drain({0}, timeout=0.05)
    assert 0.1 <= time.monotonic() - started < 0.5
    assert pool.acker.pending() == 0 and len(pool) == 1  # a job really stuck is logged
    released.set()
    await asyncio.wait(list(pool._tasks))


async def test_an_error_escaping_a_job_is_reported_and_never_acked() -> None:
    errors: list[BaseException] = []

    async def crash(exc: BaseException) -> None:  # like app.crash: a coroutine function
        errors.append(exc)

    pool = JobPool(concurrency=2, on_error=crash)
    ran: list[str] = []
    acked: list[int] = []

    async def boom() -> None:
        raise RuntimeError("send failed for good")

    await pool.submit("a", 0, 0, boom, lambda: acked.append(0))
    await pool.submit("a", 0, 1, _recorder(ran, "same key"), lambda: acked.append(1))
    await pool.submit("b", 1, 0, _recorder(ran, "other partition"), lambda: acked.append(10))
    await asyncio.sleep(0.05)
    assert [type(e) for e in errors] == [RuntimeError]
    assert sorted(ran) == ["other partition", "same key"]
    assert acked == [10]  # partition 0 acks nothing past the failed offset
    assert len(pool) == 0 and pool.acker.pending() == 2


async def test_an_error_is_logged_with_partition_and_offset_without_on_error(caplog: Any) -> None:
    pool = JobPool(concurrency=1)

    async def boom() -> None:
        raise RuntimeError("x")

    await pool.submit("a", 3, 7, boom, lambda: None)
    await asyncio.sleep(0.01)
    failed = [r for r in caplog.records if r.name == "streams.app.pool" and r.levelname == "ERROR"]
    assert [(r.__dict__["partition"], r.__dict__["offset"]) for r in failed] == [(3, 7)]
    await pool.drain(None)


def _runtime(settings: Settings | None = None) -> WorkerRuntime:
    settings = settings or Settings()

    def summarizer_for(app: str) -> SummarizerLike:
        raise AssertionError("not used")

    runtime = WorkerRuntime(settings, Topics("ev", "jobs", "sum", "dl"), TrackHandler(policies_from_settings(
        settings.summary, settings.llm.model)), summarizer_for, backoff=Backoff(0.001, 0.001))  # fmt: skip
    runtime.cache_ready.set()
    return runtime


async def test_giving_up_survives_kafka_failing_and_sends_each_record_once() -> None:
    runtime = _runtime()

    async def handle(*args: object) -> object:
        raise PermanentError("the model refused")

    runtime.summarize.handle = handle  # type: ignore[method-assign,assignment]
    sent: list[str] = []
    failures = {"dl": 2, "sum": 1}

    async def send(topic: str, key: bytes, value: bytes, partition: int, headers: object) -> None:
        if failures.get(topic, 0):
            failures[topic] -= 1
            raise KafkaConnectionError("broker gone")
        sent.append(topic)

    runtime.send = send
    await asyncio.wait_for(runtime.run_job(job(3), Coordinates("jobs", 0, 0), b"k", None), 2.0)
    assert sent == ["sum", "dl"]


async def test_revoked_and_assigned_partitions_read_their_summary_tails_again() -> None:
    runtime = _runtime()
    forgotten: list[set[int]] = []
    runtime.ledger.forget = forgotten.append  # type: ignore[method-assign]
    ran: list[str] = []
    gate = asyncio.Event()
    await runtime.pool.submit("a", 0, 0, _recorder(ran, "in flight", gate), lambda: None)
    revoke = asyncio.ensure_future(runtime.on_revoked({0, 1}))
    await asyncio.sleep(0.01)
    assert not revoke.done()  # the revoke waits for the job of partition 0
    gate.set()
    await revoke
    runtime.on_assigned({0})
    assert ran == ["in flight"] and forgotten == [{0, 1}, {0}]


async def test_a_drain_refuses_nothing_by_itself_validity_decides() -> None:
    # A drained partition assigned again takes jobs at once: no hook has to re-open it (one that
    # ran late would drop the new assignment's first jobs unacked).
    pool = JobPool(concurrency=1)
    ran: list[str] = []
    await pool.drain({0})
    assert await pool.submit("a", 0, 0, _recorder(ran, "current"), lambda: None, valid=lambda: True) is True
    assert await pool.submit("a", 0, 1, _recorder(ran, "revoked"), lambda: None, valid=lambda: False) is False
    await pool.drain(None)
    assert ran == ["current"]


class _Msg:
    def __init__(self, generation_id: int) -> None:
        self.generation_id = generation_id


class _App:
    def __init__(self, consumer_generation_id: int) -> None:
        self.consumer_generation_id = consumer_generation_id


def test_a_job_is_current_only_in_its_generation_and_not_while_that_generation_is_revoked() -> None:
    from streams.app.factory import current_job

    assert current_job(_App(3), _Msg(3), [None])
    assert current_job(_App(3), _Msg(3), [2])
    assert not current_job(_App(3), _Msg(3), [3])  # revoke under way: the assignment is not ours yet
    assert not current_job(_App(4), _Msg(3), [3])  # fetched before the rebalance
    assert current_job(_App(4), _Msg(4), [3])  # the new assignment's jobs


async def test_once_the_pool_is_drained_for_a_stop_even_a_current_job_never_starts() -> None:
    pool = JobPool(concurrency=1)
    ran: list[str] = []
    await pool.drain(None)  # the worker stops: no revoke, so ``valid`` still says "current"
    assert await pool.submit("a", 0, 0, _recorder(ran, "late"), lambda: None, valid=lambda: True) is False
    await asyncio.sleep(0)
    assert ran == []


async def test_the_worker_keeps_as_many_consumed_events_as_its_settings_say() -> None:
    """``worker.recent_events_mb`` bounds what the jobs find in memory (128 MiB unless set)."""
    assert _runtime().reader.recent.max_bytes == 128 * 1024 * 1024
    data = Settings().model_dump()
    data["worker"]["recent_events_mb"] = 8
    assert _runtime(Settings(**data)).reader.recent.max_bytes == 8 * 1024 * 1024
