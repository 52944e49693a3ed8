"""Held table writes: a small batch's rows go out with the next write, in order, acked only once sent."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from streams.app.batch_produce import OutgoingRecord
from streams.app.write_behind import WriteBehind, check_faust, install


def rows(*keys: str, topic: str = "changelog") -> list[OutgoingRecord]:
    return [(topic, k.encode(), b"v", 0) for k in keys]


class Broker:
    """Records each send; ``fail`` makes the next send raise; ``gate`` holds sends until set."""

    def __init__(self) -> None:
        self.calls: list[list[OutgoingRecord]] = []
        self.acked: list[Any] = []
        self.errors: list[BaseException] = []
        self.fail = False
        self.gate: asyncio.Event | None = None

    async def send(self, records: list[OutgoingRecord]) -> None:
        self.calls.append(list(records))
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise ConnectionError("broker gone")

    def ack(self, messages: list[Any]) -> None:
        self.acked.extend(messages)

    async def on_error(self, exc: BaseException) -> None:
        self.errors.append(exc)

    def writer(self, hold_s: float = 60.0, **kwargs: Any) -> WriteBehind:
        return WriteBehind(self.send, self.ack, hold_s, self.on_error, **kwargs)


async def test_a_held_batch_goes_out_ahead_of_the_next_write_in_one_call_and_is_acked_after() -> None:
    broker = Broker()
    writes = broker.writer()
    await writes.write(rows("a", "b"), ["m1", "m2"], hold=True)
    assert broker.calls == [] and broker.acked == [] and writes.held() == 2
    await writes.write(rows("a", "c"), ["m3"], hold=True)
    assert broker.calls == [] and writes.held() == 4
    await writes.write(rows("j", topic="jobs"), ["m4"], hold=False)
    assert broker.calls == [rows("a", "b") + rows("a", "c") + rows("j", topic="jobs")]
    assert broker.acked == ["m1", "m2", "m3", "m4"] and writes.held() == 0 and writes.sends == 1


async def test_nothing_is_acked_before_its_rows_are_on_the_broker() -> None:
    broker = Broker()
    broker.gate = asyncio.Event()
    writes = broker.writer()
    await writes.write(rows("a"), ["m1"], hold=True)
    flushing = asyncio.ensure_future(writes.write(rows("b"), ["m2"], hold=False))
    await asyncio.sleep(0)
    assert len(broker.calls) == 1 and broker.acked == []
    broker.gate.set()
    await flushing
    assert broker.acked == ["m1", "m2"]


async def test_a_hold_never_outlives_hold_s() -> None:
    broker = Broker()
    writes = broker.writer(hold_s=0.02)
    await writes.write(rows("a"), ["m1"], hold=True)
    assert broker.calls == []
    for _ in range(200):  # the timer's send, whenever the loop gets to it
        if broker.acked:
            break
        await asyncio.sleep(0.01)
    assert broker.calls == [rows("a")] and broker.acked == ["m1"] and writes.held() == 0


async def test_a_write_past_half_the_hold_sends_at_once() -> None:
    broker = Broker()
    writes = broker.writer(hold_s=0.01)
    await writes.write(rows("a"), ["m1"], hold=True)
    time.sleep(0.006)  # the loop is busy: the timer cannot send meanwhile
    await writes.write(rows("b"), ["m2"], hold=True)  # the first row has waited half its hold: both go
    assert broker.calls == [rows("a", "b")] and broker.acked == ["m1", "m2"]


@pytest.mark.parametrize(
    "kwargs",
    [{"hold_s": 0.0}, {"most": 3}, {"must_send": lambda: True}],
    ids=["hold off", "too many rows", "rebalancing"],
)
async def test_nothing_is_held_when_off_past_most_or_while_it_must_send(kwargs: dict[str, Any]) -> None:
    broker = Broker()
    writes = broker.writer(**{"hold_s": 60.0, **kwargs})
    await writes.write(rows("a", "b", "c"), ["m1"], hold=True)
    assert broker.calls == [rows("a", "b", "c")] and broker.acked == ["m1"]


async def test_a_failed_send_acks_nothing_and_a_timed_one_reports_the_error() -> None:
    broker = Broker()
    broker.fail = True
    writes = broker.writer()
    await writes.write(rows("a"), ["m1"], hold=True)
    with pytest.raises(ConnectionError):
        await writes.write(rows("b"), ["m2"], hold=False)
    assert broker.acked == []
    timed = broker.writer(hold_s=0.01)
    await timed.write(rows("c"), ["m3"], hold=True)
    for _ in range(200):
        if broker.errors:
            break
        await asyncio.sleep(0.01)
    assert [type(e) for e in broker.errors] == [ConnectionError] and broker.acked == []


async def test_an_empty_write_with_nothing_held_sends_nothing() -> None:
    broker = Broker()
    writes = broker.writer()
    await writes.write([], [], hold=False)
    assert broker.calls == [] and writes.sends == 0


class FakeApp:
    """What :func:`install` hooks on a Faust app: the producer flush of a revocation and the consumer's stop."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.should_stop = False
        self.steps: list[str] = []

    async def _producer_flush(self, logger: Any) -> None:
        self.steps.append(f"producer flush after {len(self.broker.calls)} sends")

    async def _stop_consumer(self) -> None:
        self.steps.append("consumer stopped")


async def test_a_revocation_sends_the_held_rows_before_faust_flushes_its_producer_and_commits() -> None:
    broker = Broker()
    writes = broker.writer()
    app = FakeApp(broker)
    install(app, writes)
    await writes.write(rows("a"), ["m1"], hold=True)
    await app._producer_flush(None)  # what Faust's _on_partitions_revoked awaits before its commit
    assert broker.calls == [rows("a")] and broker.acked == ["m1"]
    assert app.steps == ["producer flush after 1 sends"]


async def test_a_stop_drops_the_held_rows_unacked_before_the_consumer_leaves_the_group() -> None:
    broker = Broker()
    writes = broker.writer(hold_s=0.01)
    app = FakeApp(broker)
    install(app, writes)
    await writes.write(rows("a"), ["m1"], hold=True)
    app.should_stop = True
    await app._stop_consumer()
    await app._producer_flush(None)  # Faust's stop flushes its producer after the consumer stopped
    await asyncio.sleep(0.05)  # the hold's timer was cancelled: nothing goes out later either
    assert broker.calls == [] and broker.acked == [] and writes.held() == 0
    assert app.steps == ["consumer stopped", "producer flush after 0 sends"]


def test_the_hooks_match_the_installed_faust() -> None:
    import inspect

    import faust

    check_faust(inspect.getsource(faust.App._on_partitions_revoked), inspect.getsource(faust.App.on_stop))
    with pytest.raises(RuntimeError, match="_on_partitions_revoked changed"):
        check_faust("await self._producer_flush(self.log)", "await self._stop_consumer()")
