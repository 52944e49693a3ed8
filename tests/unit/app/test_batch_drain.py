"""The per-batch drain loop keeps Faust's per-record bookkeeping; it refuses an unknown Faust."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import faust
import pytest
from aiokafka.structs import ConsumerRecord
from faust.transport.consumer import Consumer as FaustConsumer
from faust.types import TP
from faust.types.tuples import Message

from streams.app.batch_drain import (
    BatchDrainConsumer,
    FaustVersionError,
    check_faust,
    install,
    parse_version,
)

TOPIC = "events"
CHANGELOG = "app-table-changelog"
ORIGINAL_DRAIN = inspect.getsource(FaustConsumer._drain_messages)


def test_the_installed_faust_is_accepted() -> None:
    check_faust(faust.__version__, ORIGINAL_DRAIN)


@pytest.mark.parametrize("version", ["0.15.1", "0.16.0", "1.0.0", "0.14.9rc1"])
def test_other_faust_versions_fail_loudly(version: str) -> None:
    with pytest.raises(FaustVersionError, match="outside"):
        check_faust(version, ORIGINAL_DRAIN)


def test_a_changed_drain_loop_fails_loudly() -> None:
    changed = ORIGINAL_DRAIN.replace("self.suspend_flow.wait()", "self.suspend.wait()")
    with pytest.raises(FaustVersionError, match="changed"):
        check_faust("0.15.3", changed)


def test_versions_parse_with_suffixes() -> None:
    assert parse_version("0.15.3") == (0, 15, 3)
    assert parse_version("0.15.2rc1+local") == (0, 15, 2)
    assert parse_version("0.16") == (0, 16, 0)
    with pytest.raises(FaustVersionError):
        parse_version("dev")


def _consumer() -> Any:
    app = faust.App("batch-drain-unit", broker="kafka://127.0.0.1:1", store="memory://", autodiscover=False)
    install(app)
    consumer = app.consumer
    assert isinstance(consumer, BatchDrainConsumer)
    cast_app: Any = app
    cast_app.topics._acking_topics.add(TOPIC)
    return consumer


def _deliveries(consumer: Any, *, with_topic: bool = False) -> list[Any]:
    """Make ``consumer`` record what it delivers: offsets, or ``(topic, offset)`` pairs."""
    seen: list[Any] = []

    async def callback(message: Message) -> None:
        seen.append((message.topic, message.offset) if with_topic else message.offset)

    consumer.callback = callback
    return seen


def _seeks(consumer: Any) -> list[tuple[TP, int]]:
    """Make ``consumer`` record its seeks instead of performing them."""
    sought: list[tuple[TP, int]] = []

    async def seek(tp: TP, offset: int) -> None:
        sought.append((tp, offset))

    consumer.seek = seek
    return sought


def _rebalancing(consumer: Any, *, recovering: bool) -> None:
    """Flow active, the app rebalancing (its tables ``recovering`` or not), ``CHANGELOG`` a changelog topic."""
    consumer._is_changelog_tp = lambda tp: tp.topic == CHANGELOG
    consumer.resume_flow()
    consumer.app.rebalancing = True
    consumer.app.in_recovery = recovering


def _changelog_record(topic: str, offset: int) -> tuple[TP, Message]:
    tp = TP(topic, 0)
    return tp, Message(topic, 0, offset, 0.0, 0, None, b"k", b"v", None, tp=tp, generation_id=0)


def _kafka_record(partition: int, offset: int, topic: str = TOPIC) -> ConsumerRecord[bytes, bytes]:
    """A record as aiokafka's fetcher returns it (before Faust makes it a message)."""
    value = f"{partition}:{offset} 事件".encode()
    return ConsumerRecord(topic, partition, offset, 1_700_000_000_000 + offset, 0, b"k", value, None, 1, len(value), [])


def _records(*offsets: int, partition: int = 0, generation: int = 0) -> list[tuple[TP, Message]]:
    """Records as Faust's ``getmany`` yields them: stamped with the generation they were fetched under."""
    tp = TP(TOPIC, partition)
    return [
        (tp, Message(TOPIC, partition, o, 0.0, 0, None, b"k", b"v", None, tp=tp, generation_id=generation))
        for o in offsets
    ]


async def test_every_record_is_delivered_in_order_and_marked_read() -> None:
    consumer = _consumer()
    seen = _deliveries(consumer)
    consumer._read_offset[TP(TOPIC, 0)] = 9
    await consumer._deliver_batch(_records(10, 11, 12))
    assert seen == [10, 11, 12]
    assert consumer._read_offset[TP(TOPIC, 0)] == 12


async def test_a_hole_in_the_offsets_is_registered_as_a_gap_and_old_records_are_dropped() -> None:
    consumer = _consumer()
    seen = _deliveries(consumer)
    tp = TP(TOPIC, 0)
    consumer._read_offset[tp] = 5
    await consumer._deliver_batch(_records(3, 6, 9))
    assert seen == [6, 9]  # 3 is behind the read offset (re-fetched): not delivered twice
    # Faust registers the gap through the received offset itself ([7, 10)): the same call here.
    assert sorted((i.begin, i.end) for i in consumer._gap[tp]) == [(7, 10)]


async def test_stop_flow_interrupts_the_batch_like_faust() -> None:
    consumer = _consumer()
    seen: list[int] = []
    blocked = asyncio.Event()

    async def callback(message: Message) -> None:
        seen.append(message.offset)
        if message.offset == 2:
            blocked.set()
            await asyncio.Event().wait()  # a full stream queue

    consumer.callback = callback
    consumer.resume_flow()
    deliver = asyncio.ensure_future(consumer._deliver_batch(_records(1, 2, 3, 4)))
    await blocked.wait()
    consumer.stop_flow()  # a rebalance
    await asyncio.wait_for(deliver, 2)
    assert seen == [1, 2]
    # The interrupted record counts as read (Faust sets it after wait_first); the rest is
    # neither delivered nor read, so no gap can let a commit pass it.
    assert consumer._read_offset[TP(TOPIC, 0)] == 2
    assert not consumer._gap[TP(TOPIC, 0)]


async def test_a_generation_change_stops_delivery_before_the_next_record() -> None:
    consumer = _consumer()
    seen: list[int] = []

    async def callback(message: Message) -> None:
        seen.append(message.offset)
        consumer.app.consumer_generation_id += 1

    consumer.callback = callback
    consumer.resume_flow()
    await consumer._deliver_batch(_records(1, 2, 3))
    assert seen == [1]
    assert consumer._read_offset[TP(TOPIC, 0)] == 1


async def test_a_fetch_that_waited_out_a_rebalance_is_delivered() -> None:
    """The fetch began under generation 1 and returned after the re-assignment (generation 2).

    Faust seeks the re-assigned partitions back to their committed offsets and the fetch
    returns from there: these records are the new generation's and must be delivered (the
    fetch position has moved past them; nothing would fetch them again).
    """
    consumer = _consumer()
    consumer.app.consumer_generation_id = 1
    seen: list[int] = []

    async def callback(message: Message) -> None:
        seen.append(message.offset)

    async def wait_next_records(timeout: float) -> tuple[Any, Any]:
        if consumer.app.consumer_generation_id == 1:
            consumer.app.consumer_generation_id = 2  # the rebalance completes while the fetch waits
            return {TP(TOPIC, 0): [_kafka_record(0, 7), _kafka_record(0, 8)]}, {TP(TOPIC, 0)}
        consumer._stopped.set()
        return {}, set()

    class Fetcher:
        _stopped = asyncio.Event()

    consumer.callback = callback
    consumer._wait_next_records = wait_next_records
    consumer.highwater = lambda tp: 9
    consumer.resume_flow()
    await asyncio.wait_for(consumer._drain_messages(Fetcher()), 5)
    assert seen == [7, 8]
    assert consumer._read_offset[TP(TOPIC, 0)] == 8


def test_install_refuses_an_app_whose_transport_exists() -> None:
    app = faust.App("batch-drain-unit-2", broker="kafka://127.0.0.1:1", store="memory://", autodiscover=False)
    assert app.transport is not None
    with pytest.raises(RuntimeError, match="before"):
        install(app)


def test_the_consumer_logs_under_faust_s_logger() -> None:
    from faust.transport.drivers import aiokafka as faust_aiokafka

    assert BatchDrainConsumer.logger is faust_aiokafka.logger


async def test_stream_records_wait_for_the_rebalance_to_end_changelog_records_do_not() -> None:
    """Faust clears the agents' queues when a rebalance's recovery resumes flow: a stream record
    delivered before that would be wiped after its read offset passed it (lost for good)."""
    consumer = _consumer()
    seen = _deliveries(consumer, with_topic=True)
    _rebalancing(consumer, recovering=False)
    deliver = asyncio.ensure_future(consumer._deliver_batch([_changelog_record(CHANGELOG, 5), *_records(1, 2)]))
    await asyncio.sleep(0.05)
    assert seen == [(CHANGELOG, 5)]  # recovery reads the changelog; the events wait
    assert consumer._read_offset[TP(TOPIC, 0)] is None
    consumer.app.rebalancing = False  # recovery resumed flow (and cleared the queues)
    await asyncio.wait_for(deliver, 2)
    assert seen == [(CHANGELOG, 5), (TOPIC, 1), (TOPIC, 2)]


async def test_a_stream_record_held_in_a_rebalance_that_moves_on_is_not_delivered() -> None:
    consumer = _consumer()
    seen = _deliveries(consumer)
    _rebalancing(consumer, recovering=False)
    deliver = asyncio.ensure_future(consumer._deliver_batch(_records(1, 2)))
    await asyncio.sleep(0.03)
    consumer.app.consumer_generation_id += 1  # another assignment: these records are re-fetched
    await asyncio.wait_for(deliver, 2)
    assert seen == []
    assert consumer._read_offset[TP(TOPIC, 0)] is None


async def test_while_tables_recover_stream_records_are_skipped_and_sought_back_not_waited_for() -> None:
    """Recovery reads the changelog through this same loop: it must not wait on a stream record."""
    consumer = _consumer()
    seen = _deliveries(consumer, with_topic=True)
    sought = _seeks(consumer)
    consumer.assignment = lambda: {TP(TOPIC, 0), TP(TOPIC, 1)}
    _rebalancing(consumer, recovering=True)
    records = [*_records(4, 5), _changelog_record(CHANGELOG, 9), *_records(6), *_records(2, partition=1)]
    await asyncio.wait_for(consumer._deliver_batch(records), 2)
    assert seen == [(CHANGELOG, 9)]
    assert sought == [(TP(TOPIC, 0), 4), (TP(TOPIC, 1), 2)]
    assert not consumer._gap[TP(TOPIC, 0)]


async def test_a_skipped_partition_no_longer_assigned_is_not_sought() -> None:
    consumer = _consumer()
    seen = _deliveries(consumer)
    sought = _seeks(consumer)
    consumer.assignment = lambda: {TP(TOPIC, 1)}  # partition 0 went to another worker meanwhile
    _rebalancing(consumer, recovering=True)
    await asyncio.wait_for(consumer._deliver_batch([*_records(4), *_records(2, partition=1)]), 2)
    assert seen == []  # nothing is delivered while tables recover
    assert sought == [(TP(TOPIC, 1), 2)]


async def test_a_fetch_waiting_on_full_buffers_resumes_when_a_queue_drains() -> None:
    # Every partition's stream buffer full: Faust slept a whole second before fetching again,
    # while the agent drained its queue in a fraction of it (the worker idled ~20 % of a backlog).
    consumer = _consumer()
    tp = TP(TOPIC, 0)
    consumer._active_partitions = {tp}
    consumer.app.client_only = False
    fetched: list[Any] = []

    async def getmany(active_partitions: Any, timeout: float) -> dict[TP, list[Any]]:
        fetched.append(set(active_partitions))
        return {tp: []}

    consumer._getmany = getmany
    consumer.on_buffer_full(tp)
    loop = asyncio.get_running_loop()
    loop.call_later(0.05, consumer.on_buffer_drop, tp)
    started = loop.time()
    records, active = await consumer._wait_next_records(1.0)
    assert loop.time() - started < 0.5
    assert records == {} and fetched == []
    records, active = await consumer._wait_next_records(1.0)  # the drained partition is fetched again
    assert fetched == [{tp}] and active == {tp}


async def test_a_fetch_with_no_partition_waits_its_timeout() -> None:
    consumer = _consumer()
    consumer._active_partitions = set()
    consumer.app.client_only = False
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await consumer._wait_next_records(0.2) == ({}, set())
    assert loop.time() - started >= 0.19


def test_a_changed_fetch_wait_fails_loudly() -> None:
    wait = inspect.getsource(FaustConsumer._wait_next_records).replace("await self.sleep(1)", "await self.sleep(2)")
    with pytest.raises(FaustVersionError, match="_wait_next_records"):
        check_faust("0.15.3", ORIGINAL_DRAIN, wait)


async def test_fetches_batch_while_records_flow_and_long_poll_once_idle() -> None:
    # aiokafka's fetch_min_bytes=1 made every event at a low rate a batch of one; a short
    # wait kept on an idle worker costs a fetch round trip every few ms.
    from types import SimpleNamespace

    from streams.app.batch_drain import FETCH_MAX_WAIT_MS, FETCH_MIN_BYTES, IDLE_FETCH

    consumer = _consumer()
    fetcher = SimpleNamespace(_fetch_min_bytes=1, _fetch_max_wait_ms=1500, _fetcher_timeout=0.2)
    consumer._thread._consumer = SimpleNamespace(_fetcher=fetcher)
    consumer._fetch_mode(True)
    assert (fetcher._fetch_min_bytes, fetcher._fetch_max_wait_ms) == (FETCH_MIN_BYTES, FETCH_MAX_WAIT_MS)
    assert fetcher._fetcher_timeout == 0.2  # aiokafka's own while records flow
    assert FETCH_MAX_WAIT_MS <= 40  # inside the event→job budget (p99 <= 50 ms)
    consumer._fetch_mode(False)
    assert (fetcher._fetch_min_bytes, fetcher._fetch_max_wait_ms) == IDLE_FETCH
    # Idle, aiokafka's fetch routine wakes up as often as the long poll, not five times a second.
    assert fetcher._fetcher_timeout == IDLE_FETCH[1] / 1000


async def test_the_drain_loop_switches_the_fetch_mode_by_what_it_got() -> None:
    consumer = _consumer()
    modes: list[bool] = []
    consumer._fetch_mode = modes.append
    batches = [_records(1, 2), []]

    async def fetch_batch(timeout: float) -> Any:
        batch = batches.pop(0) if batches else []
        if not batches:
            consumer._stopped.set()
        return batch

    async def deliver(records: Any) -> None:
        pass

    consumer._fetch_batch = fetch_batch
    consumer._deliver_batch = deliver
    fetcher = type("F", (), {"_stopped": asyncio.Event()})()
    await consumer._drain_messages(fetcher)
    assert modes == [True, False]


def test_partitions_no_seek_positions_are_the_uncommitted_stream_ones() -> None:
    """aiokafka seeks only offsets > 0: None and 0 leave the fetch position where the fetcher left it."""
    from aiokafka import TopicPartition

    from streams.app.batch_drain import uncommitted_stream_partitions

    events = [TopicPartition("t.events", p) for p in range(4)]
    changelog = TopicPartition("t-track-changelog", 0)
    committed = {events[0]: None, events[1]: 0, events[2]: 17, events[3]: 1, changelog: None}
    found = uncommitted_stream_partitions(committed, lambda tp: tp.topic.endswith("-changelog"))
    assert found == [events[0], events[1]]


async def test_the_batching_wait_is_the_one_the_app_was_installed_with() -> None:
    # worker.batch_fetch_wait_ms: a low-rate worker trades event latency for fewer wake-ups.
    from types import SimpleNamespace

    from streams.app.batch_drain import FETCH_MIN_BYTES, IDLE_FETCH

    app = faust.App("batch-drain-wait", broker="kafka://127.0.0.1:1", store="memory://", autodiscover=False)
    install(app, batch_wait_ms=100)
    consumer: Any = app.consumer
    fetcher = SimpleNamespace(_fetch_min_bytes=1, _fetch_max_wait_ms=1500)
    consumer._thread._consumer = SimpleNamespace(_fetcher=fetcher)
    consumer._fetch_mode(True)
    assert (fetcher._fetch_min_bytes, fetcher._fetch_max_wait_ms) == (FETCH_MIN_BYTES, 100)
    consumer._fetch_mode(False)
    assert (fetcher._fetch_min_bytes, fetcher._fetch_max_wait_ms) == IDLE_FETCH


async def test_while_records_flow_every_fetch_takes_the_wait_the_fetch_wait_gives_now() -> None:
    # A lightly loaded worker waits longer (streams.app.fetch_wait): the fetcher follows each cycle.
    from types import SimpleNamespace

    from streams.app.batch_drain import FETCH_MIN_BYTES, IDLE_FETCH
    from streams.app.fetch_wait import FetchWait

    app = faust.App("batch-drain-adaptive", broker="kafka://127.0.0.1:1", store="memory://", autodiscover=False)
    fetch_wait = FetchWait(30, 50, margin_ms=5)
    install(app, fetch_wait=fetch_wait)
    consumer: Any = app.consumer
    fetcher = SimpleNamespace(_fetch_min_bytes=1, _fetch_max_wait_ms=1500)
    consumer._thread._consumer = SimpleNamespace(_fetcher=fetcher)
    consumer._fetch_mode(True)
    assert (fetcher._fetch_min_bytes, fetcher._fetch_max_wait_ms) == (FETCH_MIN_BYTES, 30)
    for _ in range(200):
        fetch_wait.note(0.003)
    consumer._fetch_mode(True)
    assert fetcher._fetch_max_wait_ms == 42
    fetch_wait.note(0.030)
    consumer._fetch_mode(True)
    assert fetcher._fetch_max_wait_ms == 30
    consumer._fetch_mode(False)
    assert (fetcher._fetch_min_bytes, fetcher._fetch_max_wait_ms) == IDLE_FETCH


async def test_a_fetched_message_carries_the_time_it_was_fetched() -> None:
    """The track agent measures a batch's lag from it (streams.app.fetch_wait)."""
    import time

    consumer = _consumer()
    consumer.resume_flow()
    tp = TP(TOPIC, 0)
    _fetched(consumer, {tp: [_kafka_record(0, 1), _kafka_record(0, 2)]}, {tp}, {tp: 5})
    before = time.monotonic()
    got = await consumer._fetch_batch(timeout=1.0)
    after = time.monotonic()
    stamps = {m.time_in for _, m in got}
    assert len(got) == 2 and len(stamps) == 1
    assert before <= stamps.pop() <= after


def _fetched(consumer: Any, records: dict[TP, list[Any]], active: set[TP] | None, marks: dict[TP, int]) -> None:
    """Make every fetch of ``consumer`` return ``records`` (``active``: the partitions asked for)."""

    async def wait_next_records(timeout: float) -> tuple[Any, Any]:
        return records, active

    consumer._wait_next_records = wait_next_records
    consumer.highwater = lambda tp: marks[tp]


@pytest.mark.parametrize("active", ["all", "some", "client-only"])
async def test_a_fetch_batch_is_what_faust_getmany_yields(active: str) -> None:
    """The records, their order (the scheduler's round robin), the messages' fields and generation, and
    the lag monitor's end offsets: as Faust's per-record ``getmany`` gives them, for one fetch."""
    tps = [TP(TOPIC, p) for p in range(3)] + [TP(CHANGELOG, 0)]
    records = {tp: [_kafka_record(tp.partition, o, tp.topic) for o in range(5 * i, 5 * i + 2 + i)]
               for i, tp in enumerate(tps)}  # fmt: skip
    marks = {tp: 100 + i for i, tp in enumerate(tps)}
    asked = None if active == "client-only" else set(tps) if active == "all" else {tps[0], tps[3]}

    async def fetch_with(method: Any) -> tuple[list[tuple[Any, ...]], dict[TP, int]]:
        consumer = _consumer()
        consumer.resume_flow()
        consumer.app.consumer_generation_id = 7
        consumer._buffered_partitions = {tps[2]} if active == "some" else set()
        _fetched(consumer, records, asked, marks)
        items = await method(consumer)
        shaped = [(tp, m.topic, m.partition, m.offset, m.timestamp, m.key, m.value, m.generation_id, m.tp)
                  for tp, m in items]  # fmt: skip
        return shaped, dict(consumer.app.monitor.tp_end_offsets)

    async def faust_way(consumer: Any) -> list[Any]:
        return [item async for item in FaustConsumer.getmany(consumer, timeout=1.0)]

    async def ours(consumer: Any) -> list[Any]:
        return list(await consumer._fetch_batch(timeout=1.0))

    expected, expected_marks = await fetch_with(faust_way)
    got, got_marks = await fetch_with(ours)
    assert got == expected
    assert got_marks == expected_marks
    assert len(got) == (sum(map(len, records.values())) if active != "some" else 2 + 4 + 5)
    assert {g[7] for g in got} == {7}


async def test_a_fetch_while_flow_is_stopped_delivers_nothing_and_seeks_back() -> None:
    consumer = _consumer()
    consumer.stop_flow()
    consumer.can_resume_flow.set()  # the wait for flow is Faust's _wait_next_records's, stubbed here
    _fetched(consumer, {TP(TOPIC, 0): [_kafka_record(0, 1)]}, {TP(TOPIC, 0)}, {TP(TOPIC, 0): 5})
    sought: list[bool] = []

    async def perform_seek() -> None:
        sought.append(True)

    consumer.perform_seek = perform_seek
    assert await consumer._fetch_batch(timeout=1.0) == []
    assert sought == [True]


def test_a_changed_getmany_fails_loudly() -> None:
    original = inspect.getsource(FaustConsumer.getmany)
    changed = original.replace("highwater_mark = self.highwater(tp)", "mark = self.highwater(tp)")
    check_faust(faust.__version__, ORIGINAL_DRAIN, None, original)
    with pytest.raises(FaustVersionError, match="getmany changed"):
        check_faust(faust.__version__, ORIGINAL_DRAIN, None, changed)


class _ConsumerThread:
    """A consumer thread as Faust's (``thread_loop`` running in its own thread), whose method queue must not be used."""

    def __init__(self) -> None:
        import threading

        self.thread_loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.thread_loop.run_forever, daemon=True)
        self._thread.start()
        self.ran_in: list[Any] = []
        self.cancelled = asyncio.Event()
        self.calls: list[tuple[Any, float, int]] = []

    def _ensure_consumer(self) -> Any:
        from types import SimpleNamespace

        return SimpleNamespace(_max_poll_records=7)

    async def call_thread(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the fetch went through the method queue")

    async def _fetch_records(self, consumer: Any, active: Any, *, timeout: float, max_records: int) -> Any:
        import threading

        self.ran_in.append(threading.current_thread())
        self.calls.append((active, timeout, max_records))
        if timeout > 100:  # the caller is cancelled meanwhile
            try:
                await asyncio.sleep(timeout)
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
        return {"tp": ["record"]}

    def stop(self) -> None:
        self.thread_loop.call_soon_threadsafe(self.thread_loop.stop)
        self._thread.join(5)
        self.thread_loop.close()


async def test_a_fetch_runs_on_the_consumer_thread_s_loop_without_its_method_queue() -> None:
    consumer = _consumer()
    thread = consumer._thread = _ConsumerThread()
    try:
        assert await consumer._getmany({"tp"}, 0.5) == {"tp": ["record"]}
        assert thread.ran_in == [thread._thread]  # in the thread, with Faust's arguments
        assert thread.calls == [({"tp"}, 0.5, 7)]
    finally:
        thread.stop()


async def test_cancelling_a_fetch_cancels_it_in_the_consumer_thread() -> None:
    from streams.app.batch_drain import fetch_in_thread

    thread = _ConsumerThread()
    try:
        fetching = asyncio.ensure_future(fetch_in_thread(thread, None, 1000.0))
        while not thread.calls:
            await asyncio.sleep(0.01)
        fetching.cancel()
        with pytest.raises(asyncio.CancelledError):
            await fetching
        for _ in range(500):  # the cancellation reaches the thread's loop (one more thread-safe hop)
            if thread.cancelled.is_set():
                break
            await asyncio.sleep(0.01)
        assert thread.cancelled.is_set()
    finally:
        thread.stop()


def test_a_changed_thread_getmany_fails_loudly() -> None:
    from streams.app.batch_drain import check_thread_getmany

    delegate = "return await self._thread.getmany(active_partitions, timeout)"
    thread = "\n".join(
        ["self._fetch_records,", "_consumer,", "active_partitions,", "timeout=timeout,",
         "max_records=_consumer._max_poll_records,"]
    )  # fmt: skip
    check_thread_getmany(delegate, thread)
    with pytest.raises(FaustVersionError, match="ThreadDelegateConsumer"):
        check_thread_getmany("return await self._thread.fetch(timeout)", thread)
    with pytest.raises(FaustVersionError, match="max_records"):
        check_thread_getmany(delegate, thread.replace("max_records=_consumer._max_poll_records,", ""))
