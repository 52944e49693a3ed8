"""A Faust consumer whose drain loop checks flow suspension once per fetched batch.

Why: Faust's ``Consumer._drain_messages`` hands every fetched record to the
conductor through ``wait_first(callback(message), suspend_flow.wait())``, so a
rebalance (``stop_flow``) can interrupt a record stuck in a full stream queue.
That costs four tasks and an ``asyncio.wait`` per record: about an eighth of
the worker's main thread at ingest rates (see ``benchmarks/bench_pipeline.py``
``--profile``). Here one task delivers a whole fetched batch and is raced
against ``suspend_flow`` once; inside it each record is awaited directly. The
leading records that need no await at all (the events topic's, offered to its
sink) are delivered before that, without the race: nothing can interrupt them.

Faust's semantics are kept record for record:

* the batch comes from Faust's own ``getmany`` (round-robin over partitions,
  active-partition filter, seek back to committed offsets while flow is
  stopped);
* a stream (non-changelog) record is not delivered while the app is rebalancing:
  see :meth:`BatchDrainConsumer._until_rebalanced` (Faust's own per-record loop has
  the same window, narrower; a whole batch made it likely);
* before each record, delivery stops when flow is no longer active or the
  consumer generation is no longer the one the batch was fetched under (what
  ``getmany`` checks between records, against the generation read after the fetch);
* read offsets, gap registration (a gap counts as acked when committing) and
  count-based commits happen per record, before its callback, as in Faust;
* when ``stop_flow`` or a stop interrupts a callback, that callback is cancelled
  and its record's read offset is still set (as ``wait_first`` returning does);
  the rest of the batch is not delivered and no read offset or gap is recorded
  for it, so nothing after it can be committed until Faust seeks back.

Topics given to :func:`route` (the events topic) skip the conductor: at the point
where a record's callback would run, its raw message goes to a
:class:`~streams.app.record_sink.RecordSink` instead, after the same rebalance,
generation and read-offset rules.

Acks, commits (``_new_offset`` and the head-gap check of faust#606: keep agent
``concurrency=1``) and rebalance handling are untouched Faust code.

Pinned to faust-streaming 0.15.x: :func:`check_faust` fails loudly at import
when the version or the replaced method looks different, rather than running
a drain loop that no longer matches the consumer around it.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from time import monotonic
from typing import Any, ClassVar

import faust
from faust.transport.consumer import CONSUMER_FETCHING, ThreadDelegateConsumer
from faust.transport.consumer import Consumer as BaseConsumer
from faust.transport.drivers import aiokafka as faust_aiokafka

from streams import metrics
from streams.app.fetch_wait import FetchWait
from streams.app.record_sink import RecordSink

log = logging.getLogger(__name__)

SUPPORTED_FAUST = ((0, 15, 2), (0, 16, 0))
"""faust-streaming versions ``[low, high)`` whose ``_drain_messages`` this module replaces."""

# Statements of Faust's per-record drain this module re-implements; if one is gone, Faust changed.
_EXPECTED_DRAIN = (
    "callback(message), self.suspend_flow.wait()",
    "set_read_offset(tp, offset)",
    "await self._add_gap(tp, r_offset + 1, offset)",
    "if self._n_acked >= commit_every:",
    "getmany(timeout=1.0)",
)
# Statements of Faust's ``getmany`` that :meth:`BatchDrainConsumer._fetch_batch` re-implements.
_EXPECTED_GETMANY = (
    "records, active_partitions = await self._wait_next_records(timeout)",
    "generation_id = self.app.consumer_generation_id",
    "records_it = self.scheduler.iterate(records)",
    "or tp in self._buffered_partitions",
    "highwater_mark = self.highwater(tp)",
    "self.app.monitor.track_tp_end_offset(tp, highwater_mark)",
    "yield tp, to_message(tp, record)",
    "await self.perform_seek()",
)
# Statements of Faust's ``_wait_next_records`` that :meth:`BatchDrainConsumer._wait_next_records` re-implements.
_EXPECTED_WAIT = (
    "await self.wait(self.can_resume_flow)",
    "active_partitions = self._get_active_partitions()",
    "records = await self._getmany(",
    "await self.sleep(1)",
    "self.not_waiting_next_records.set()",
)
REBALANCE_POLL_S = 0.01
"""How often a stream record held back during a rebalance looks whether it is over."""
YIELD_EVERY = 100
"""Records delivered between forced yields to the event loop (Faust's value)."""


class FaustVersionError(RuntimeError):
    """The installed faust-streaming is not the one :mod:`streams.app.batch_drain` was written for."""


def parse_version(text: str) -> tuple[int, int, int]:
    """``"0.15.3"`` → ``(0, 15, 3)``; anything after the numbers (``rc1``, ``+local``) is ignored."""
    found = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if found is None:
        raise FaustVersionError(f"unreadable faust-streaming version {text!r}")
    return int(found[1]), int(found[2]), int(found[3] or 0)


def check_faust(
    version: str, drain_source: str, wait_source: str | None = None, getmany_source: str | None = None
) -> None:
    """Raise :class:`FaustVersionError` unless ``version``, Faust's drain loop, fetch wait and ``getmany``
    are the known ones."""
    low, high = SUPPORTED_FAUST
    found = parse_version(version)
    if not low <= found < high:
        raise FaustVersionError(
            f"faust-streaming {version} is outside {low}..{high} (exclusive): re-check "
            "streams/app/batch_drain.py against Consumer._drain_messages before widening the range"
        )
    missing = [s for s in _EXPECTED_DRAIN if s not in drain_source]
    if missing:
        raise FaustVersionError(f"faust's Consumer._drain_messages changed (no {missing[0]!r}): re-check batch_drain")
    missing = [s for s in _EXPECTED_WAIT if wait_source is not None and s not in wait_source]
    if missing:
        raise FaustVersionError(
            f"faust's Consumer._wait_next_records changed (no {missing[0]!r}): re-check batch_drain"
        )
    missing = [s for s in _EXPECTED_GETMANY if getmany_source is not None and s not in getmany_source]
    if missing:
        raise FaustVersionError(f"faust's Consumer.getmany changed (no {missing[0]!r}): re-check batch_drain")


check_faust(
    faust.__version__,
    inspect.getsource(BaseConsumer._drain_messages),
    inspect.getsource(BaseConsumer._wait_next_records),
    inspect.getsource(BaseConsumer.getmany),
)
if "await self.seek_to_committed()" not in inspect.getsource(BaseConsumer.perform_seek):
    raise FaustVersionError("faust's Consumer.perform_seek no longer calls seek_to_committed: re-check batch_drain")

# Statements of Faust's fetch hand-off to the consumer thread that :func:`fetch_in_thread` re-implements.
_EXPECTED_THREAD_GETMANY = (
    "self._fetch_records,",
    "_consumer,",
    "active_partitions,",
    "timeout=timeout,",
    "max_records=_consumer._max_poll_records,",
)


def check_thread_getmany(delegate_source: str, thread_source: str) -> None:
    """Raise :class:`FaustVersionError` unless Faust's ``ThreadDelegateConsumer._getmany`` hands the fetch to
    its thread's ``getmany``, and that calls ``_fetch_records`` as :func:`fetch_in_thread` does."""
    if "self._thread.getmany(active_partitions, timeout)" not in delegate_source:
        raise FaustVersionError("faust's ThreadDelegateConsumer._getmany changed: re-check fetch_in_thread")
    missing = [s for s in _EXPECTED_THREAD_GETMANY if s not in thread_source]
    if missing:
        raise FaustVersionError(
            f"faust's AIOKafkaConsumerThread.getmany changed (no {missing[0]!r}): re-check fetch_in_thread"
        )


check_thread_getmany(
    inspect.getsource(ThreadDelegateConsumer._getmany),
    inspect.getsource(faust_aiokafka.AIOKafkaConsumerThread.getmany),
)


async def fetch_in_thread(thread: Any, active_partitions: Any, timeout: float) -> Any:
    """What Faust's consumer thread's ``getmany`` returns, scheduled straight on the thread's event loop.

    Faust sends every call to its consumer thread through a method queue (``mode``'s
    ``QueueServiceThread.call_thread``): a worker task in the thread waits on the queue through
    ``Service.wait`` (tasks and futures for the queue and the service's stop, an ``asyncio.wait``)
    and answers through another thread-safe callback. For the fetch, once per fetch cycle, that
    was about a sixth of the consumer thread's CPU at a low event rate. Here the fetch coroutine
    is handed to the thread's loop as a task (``run_coroutine_threadsafe``): one thread-safe
    call each way. Cancelling the caller cancels the fetch in the thread.
    """
    consumer = thread._ensure_consumer()
    fetch = thread._fetch_records(consumer, active_partitions, timeout=timeout, max_records=consumer._max_poll_records)
    try:
        handed = asyncio.run_coroutine_threadsafe(fetch, thread.thread_loop)
    except BaseException:  # the thread's loop is closed: as Faust's queue, the call fails
        fetch.close()
        raise
    return await asyncio.wrap_future(handed)


def uncommitted_stream_partitions(
    committed: Mapping[Any, int | None], is_changelog: Callable[[Any], bool]
) -> list[Any]:
    """The partitions of ``committed`` (aiokafka's answer) whose fetch position no seek sets: no offset, or 0."""
    return [tp for tp, offset in committed.items() if not offset and not is_changelog(tp)]


class _Cursor:
    """The record whose callback is running (its read offset is set even if interrupted)."""

    __slots__ = ("offset", "tp")

    def __init__(self) -> None:
        self.tp: Any = None
        self.offset = -1


class BatchDrainConsumer(faust_aiokafka.Consumer):
    """Faust's aiokafka consumer with the per-batch drain loop (see the module docstring)."""

    _flowing = False
    _wait_ms = 0

    def _fetch_mode(self, flowing: bool) -> None:
        """Batching fetches while records flow, the long poll once a fetch found none (see set_fetch_mode).

        While records flow, the batching wait is looked up for every fetch: it follows the
        transport's :class:`~streams.app.fetch_wait.FetchWait` (the event→job budget less the
        worker's recent lag).
        """
        fetch_wait = getattr(self.transport, "fetch_wait", None)
        wait_ms = fetch_wait.wait_ms() if flowing and fetch_wait is not None else FETCH_MAX_WAIT_MS
        if flowing == self._flowing and (not flowing or wait_ms == self._wait_ms):
            return
        kafka = getattr(self._thread, "_consumer", None)
        fetcher = getattr(kafka, "_fetcher", None)
        if fetcher is not None:
            set_fetch_mode(fetcher, flowing, wait_ms)
            if flowing and wait_ms != self._wait_ms:
                metrics.FETCH_WAIT.set(wait_ms)
            self._flowing = flowing
            self._wait_ms = wait_ms

    _buffer_dropped: asyncio.Event | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sinks: dict[str, RecordSink] = {}
        """Topics whose records go to a :class:`~streams.app.record_sink.RecordSink` instead of the conductor."""

    async def seek_to_committed(self) -> Mapping[Any, int]:
        """Faust's seek to the committed offsets; a stream partition without one goes to its beginning.

        aiokafka's ``seek_to_committed`` leaves a partition alone when its committed offset
        is ``None`` or 0, so its fetch position stays where the fetcher left it. After a
        rebalance that can be past records fetched while the flow was stopped (``_deliver``
        drops them unread: they belong to no agent yet), and no seek fetched them again: the
        first records of a partition the group never committed were skipped for good (a worker
        kept two partitions across a rebalance and never tracked their first round of events;
        the next round's job then summarized only its own events). Such a partition now starts
        from its first offset, as ``auto_offset_reset="earliest"`` does for a new group;
        changelog partitions are the recovery's to seek.
        """
        committed = await super().seek_to_committed()
        fresh = uncommitted_stream_partitions(committed, self._is_changelog_tp)
        if fresh:
            earliest = await self.earliest_offsets(*fresh)
            await self.seek_wait(earliest)
            log.info(
                "partitions without a committed offset sought to their beginning",
                extra={"partitions": ",".join(f"{tp.topic}[{tp.partition}]@{earliest.get(tp)}" for tp in fresh)},
            )
        return committed

    def on_buffer_drop(self, tp: Any) -> None:
        super().on_buffer_drop(tp)
        if self._buffer_dropped is not None:
            self._buffer_dropped.set()

    async def _getmany(self, active_partitions: Any, timeout: float) -> Any:
        return await fetch_in_thread(self._thread, active_partitions, timeout)

    async def _wait_next_records(self, timeout: float) -> tuple[Any, Any]:
        """Faust's fetch wait, except when every partition's stream buffer is full.

        Faust then sleeps a full second (``sleep(1)``) before it looks again, while an
        agent drains a full queue in a fraction of that: under a backlog the worker idled
        about a fifth of the time. Here it waits until an agent's queue has drained to its
        low mark (Faust's ``on_buffer_drop`` puts the partition back among the active
        ones), at most ``timeout``. Memory stays bounded by ``stream_buffer_maxsize``.
        """
        if not self.flow_active:
            await self.wait(self.can_resume_flow)  # type: ignore[arg-type]  # asyncio.Event works (as in Faust)
        try:
            self.not_waiting_next_records.set()
            if self.app.client_only:
                return await self._getmany(active_partitions=None, timeout=timeout), None
            active_partitions = self._get_active_partitions()
            if active_partitions:
                return await self._getmany(active_partitions=active_partitions, timeout=timeout), active_partitions
            if self._buffer_dropped is None:
                self._buffer_dropped = asyncio.Event()
            dropped = self._buffer_dropped
            dropped.clear()
            if not self._buffered_partitions:  # nothing will drop: paused or unassigned, Faust's wait
                await self.sleep(timeout)
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(dropped.wait(), timeout)
            return {}, active_partitions
        finally:
            self.not_waiting_next_records.set()

    async def _drain_messages(self, fetcher: Any) -> None:
        consumer_should_stop = self._stopped.is_set
        fetcher_should_stop = fetcher._stopped.is_set
        try:
            while not (consumer_should_stop() or fetcher_should_stop()):
                self.diag.set_flag(CONSUMER_FETCHING)
                # Faust sleeps here too (before its getmany generator starts): a fetch may return at
                # once, without releasing the loop. Not mode's ``sleep(0)``: that is a task waiting on
                # the service's stop, cancelled at once, and a ``TimeoutError``, every fetch cycle.
                await asyncio.sleep(0)
                if not self.should_stop:
                    records = await self._fetch_batch(timeout=1.0)
                    if records:
                        self._fetch_mode(True)
                        await self._deliver_batch(records)
                    elif not self._buffered_partitions:  # nothing came (not: every buffer was full)
                        self._fetch_mode(False)
                self.diag.unset_flag(CONSUMER_FETCHING)
        except self.consumer_stopped_errors:
            if self.transport.app.should_stop:
                self.log.info("Broker stopped consumer, shutting down...")
                return
            raise
        except asyncio.CancelledError:
            if self.transport.app.should_stop:
                self.log.info("Consumer shutting down for user cancel.")
                return
            raise
        except Exception as exc:
            self.log.exception("Drain messages raised: %r", exc)
            raise
        finally:
            self.diag.unset_flag(CONSUMER_FETCHING)

    async def _fetch_batch(self, timeout: float) -> list[tuple[Any, Any]]:
        """What Faust's ``getmany`` yields for one fetch, as a list.

        The same records in the same order (the scheduler's round robin over partitions), each
        a Faust message stamped with the current generation, from the active or buffered
        partitions only; while flow is stopped, nothing, and a seek back to the committed
        offsets. Faust checks the flow and the generation before every record, but nothing
        awaits between two of its records, so neither can change inside one fetch: the flow is
        checked once, and each message carries the generation read when it is made, which
        ``_deliver`` checks before every record. The partition's
        high-water mark (Faust reads it from the consumer thread for every record, for the lag
        monitor) is read once per partition and fetch: it is the same number for all of them.
        """
        records, active_partitions = await self._wait_next_records(timeout)
        if records is None or self.should_stop:
            return []
        if not self.flow_active:
            self.log.dev("getmany called while flow not active. Seek back to committed offsets.")
            try:
                await self.perform_seek()
            except Exception as ex:
                self.log.warning(f"exception performing seek when flow not active {ex}")
            return []
        to_message = self._to_message
        buffered = self._buffered_partitions
        track_end = self.app.monitor.track_tp_end_offset
        tracked: set[Any] = set()
        out: list[tuple[Any, Any]] = []
        fetched_at = monotonic()
        for tp, record in self.scheduler.iterate(records):
            if active_partitions is None or tp in active_partitions or tp in buffered:
                if tp not in tracked:
                    tracked.add(tp)
                    track_end(tp, self.highwater(tp))
                message = to_message(tp, record)
                message.time_in = fetched_at  # its lag is measured from here (streams.app.fetch_wait)
                out.append((tp, message))
        return out

    async def _deliver_batch(self, records: list[tuple[Any, Any]]) -> None:
        """Deliver ``records`` in one task, interrupted by ``stop_flow`` or a stop (see the module)."""
        cursor = _Cursor()
        # The generation the records were fetched under: ``getmany`` stamps each message when it
        # converts it, after the fetch, and stops yielding if the generation changes meanwhile.
        # Not the generation before the call: the fetch can wait out a whole rebalance (flow
        # stopped, partitions re-assigned and sought back), and its records then belong to the
        # new generation; dropping them would lose them for good (the fetch position has passed).
        generation_id = records[0][1].generation_id
        done = self._deliver_ready(records, generation_id)
        if done < 0 or done == len(records):
            return
        await self.wait_first(self._deliver(records[done:], cursor, generation_id), self.suspend_flow.wait())
        if cursor.tp is not None:  # interrupted inside a callback: Faust still marks it read
            self._read_offset[cursor.tp] = cursor.offset

    def _deliver_ready(self, records: list[tuple[Any, Any]], generation_id: int) -> int:
        """Deliver the leading records that need no await, as :meth:`_deliver` would; how many were
        dealt with (delivered or dropped), or -1: delivery stops (flow stopped, generation changed).

        Most batches at a low rate are a few records of the events topic, all offered to its sink
        without waiting: racing them against ``suspend_flow`` in a task (``wait_first``: four tasks
        and an ``asyncio.wait``) was a sixth of the event loop's steps per fetch cycle, and nothing
        can interrupt code that never awaits. The first record that would wait (a rebalance, a gap,
        a count-based commit, a conductor callback, a full sink, :data:`YIELD_EVERY`) and the ones
        after it go to :meth:`_deliver`, under the race.
        """
        app = self.app
        read_offset = self._read_offset
        sinks = self.sinks
        commit_every = self._commit_every
        is_changelog = self._is_changelog_tp
        for i, (tp, message) in enumerate(records):
            if not self.flow_active or app.consumer_generation_id != generation_id:
                return -1
            if i >= YIELD_EVERY or (app.rebalancing and not is_changelog(tp)):
                return i
            sink = sinks.get(message.topic)
            if sink is None or (commit_every is not None and self._n_acked >= commit_every):
                return i
            offset = message.offset
            r_offset = read_offset[tp]
            if r_offset is not None and offset < r_offset:
                self.log.dev("DROPPED MESSAGE ROFF %r: k=%r v=%r", offset, message.key, message.value)
                continue
            if r_offset and offset - r_offset > 1 and app.topics.acks_enabled_for(message.topic):
                return i  # a gap to register (awaited)
            if not sink.offer(message.tp, message):
                return i
            read_offset[tp] = offset
        return len(records)

    async def _deliver(self, records: Iterable[tuple[Any, Any]], cursor: _Cursor, generation_id: int) -> None:
        app = self.app
        callback = self.callback
        read_offset = self._read_offset
        commit_every = self._commit_every
        acks_enabled_for = app.topics.acks_enabled_for
        since_yield = 0
        is_changelog = self._is_changelog_tp
        rewind: dict[Any, int] = {}  # stream partition → first record not delivered (fetched again)
        sinks = self.sinks
        for tp, message in records:
            if not self.flow_active or app.consumer_generation_id != generation_id:
                return
            if tp in rewind:
                continue
            if app.rebalancing and not is_changelog(tp):
                await self._until_rebalanced(generation_id)
                if not self.flow_active or app.consumer_generation_id != generation_id:
                    return
                if app.rebalancing:  # tables are recovering through this loop: it must not wait
                    rewind[tp] = message.offset
                    continue
            since_yield += 1
            if since_yield > YIELD_EVERY:
                await asyncio.sleep(0)
                since_yield = 0
            offset = message.offset
            r_offset = read_offset[tp]
            if r_offset is not None and offset < r_offset:
                self.log.dev("DROPPED MESSAGE ROFF %r: k=%r v=%r", offset, message.key, message.value)
                continue
            if r_offset and offset - r_offset > 1 and acks_enabled_for(message.topic):
                await self._add_gap(tp, r_offset + 1, offset)
            if commit_every is not None and self._n_acked >= commit_every:
                self._n_acked = 0
                # Shielded: a stop_flow interrupting this task must not cancel a commit that has
                # already taken the acked offsets off its books (Faust commits outside the race).
                await asyncio.shield(self.commit())
            cursor.tp, cursor.offset = tp, offset
            sink = sinks.get(message.topic)
            if sink is None:
                await callback(message)
            elif not sink.offer(message.tp, message):
                await sink.put(message.tp, message)
            cursor.tp = None
            read_offset[tp] = offset
        if rewind and app.consumer_generation_id == generation_id:  # else the new assignment seeks
            assigned = self.assignment()
            rewind = {tp: offset for tp, offset in rewind.items() if tp in assigned}
            for tp, offset in rewind.items():
                # Back to the first record not delivered (never past one: everything before it in
                # this generation was delivered); also sets the read offset, so no gap covers them.
                await self.seek(tp, offset)
        if rewind:
            log.info(
                "records fetched during table recovery: partitions sought back",
                extra={"partitions": ",".join(f"{tp.topic}[{tp.partition}]@{o}" for tp, o in rewind.items())},
            )

    async def _until_rebalanced(self, generation_id: int) -> None:
        """Wait until the rebalance of ``generation_id`` is over (or another one began).

        Faust resumes the consumer's flow while the tables recover, then resumes the
        stream partitions and seeks them, and only then resumes ``app.flow_control``,
        which *clears every agent queue*. A stream record delivered before that clear
        is wiped from its agent's queue after its read offset moved past it: nothing
        fetches it again, and the next record's gap counts it as acked. So stream records
        wait here until the rebalance ended (changelog records flow: recovery reads them).
        While the tables recover, this loop must go on fetching their changelogs: then
        it returns at once and the caller skips the partition and seeks it back.
        """
        app = self.app
        while (
            app.rebalancing
            and not app.in_recovery
            and app.consumer_generation_id == generation_id
            and not self.should_stop
        ):
            await asyncio.sleep(REBALANCE_POLL_S)


FETCH_MIN_BYTES = 64 * 1024
"""While records flow, a fetch returns once this much is waiting, or after :data:`FETCH_MAX_WAIT_MS`."""
FETCH_MAX_WAIT_MS = 30
"""The longest a fetch waits for :data:`FETCH_MIN_BYTES` while records flow.

Each fetch-and-batch cycle costs ~5 ms of CPU whatever its size (the fetch in the consumer's
thread, the thread hop, the batch's changelog produce and its acks): at 500 events/s a 15 ms
wait made batches of ~7 events and ~690 µs of CPU per event, 30 ms ~476, 60 ms ~350
(``bench_backlog.py --rate 500``; saturated: ~140). Worst case it delays an event by this much
when the stream is steady but thin; a stream that pauses gets the long poll (``IDLE_FETCH``),
which returns at the first record. 30 ms stays inside the 50 ms event→job budget (the batch's
changelog records and jobs no longer linger 5 ms in the producer: ``streams.app.batch_produce``);
at 500 events/s with jobs, event→job p50 was 65 / 49 / 55 ms at 15 / 30 / 60 ms (the worker's
CPU, not the wait, made it: ``bench_pipeline.py``).

Most of that per-cycle cost is the machine's, not the code's: after a sleep the same decoding
costs ~3-4x its CPU back to back (``bench_wake.py``: cold caches on a vCPU that idled), so only
fewer wake-ups per event bring it down. Per cycle the worker wakes its event loop twice (the
fetch's records, the produce's answer) and its consumer thread twice (the fetch request, the
broker's answer); it took ~2.3 ms of event-loop and ~1.4 ms of consumer-thread CPU per cycle of
~17 events at 500 events/s (issue 14: 170-193 µs/event; 40 ms: 149-156). Since the table writes of
such cycles share a produce (``streams.app.write_behind``) the loop wakes ~1.3 times per cycle
(median 208 → 178 µs/event). The default; a worker
takes ``worker.batch_fetch_wait_ms`` (at 500 events/s, 100 ms: 164 µs/event against 325-360 at
30, before issue 14's cuts) as the floor of its wait, which ``streams.app.fetch_wait`` lengthens
within the event→job budget when the worker's lag leaves room."""
IDLE_FETCH = (1, 1500)
"""``(fetch_min_bytes, fetch_max_wait_ms)`` when the last fetch found nothing: Faust's long poll."""
ROUTINE_TIMEOUT_S = (0.2, 1.5)
"""How long aiokafka's background fetch routine sleeps at most with nothing to do, while records
flow (aiokafka's ``consumer_timeout_ms``, 200 ms) and once idle. Everything the routine must act on
wakes it (a fetch's answer, a consumed batch, a seek, an assignment, a resume, missing metadata); the
timeout only adds wake-ups: idle, five a second, half the consumer thread's wake-ups."""


def set_fetch_mode(fetcher: Any, flowing: bool, wait_ms: int = FETCH_MAX_WAIT_MS) -> None:
    """Switch an aiokafka ``Fetcher`` between batching (records flow) and the idle long poll.

    With aiokafka's ``fetch_min_bytes=1`` a fetch returns as soon as one record is
    there: at a low rate every event was fetched, delivered, folded, written to the
    changelog and acked alone, a batch of one (the fixed cost of each step paid per
    event, several times the per-event cost under load). While records flow, a fetch
    waits up to ``wait_ms`` for ``FETCH_MIN_BYTES`` (small batches at a
    bounded latency; under a backlog the bytes are there at once). Once a fetch finds
    nothing, the long poll is back: a short wait on an idle worker is a fetch round
    trip every few milliseconds (ten times the idle CPU). The fetcher reads both
    attributes for each request it builds (aiokafka 0.14); it runs in the consumer's
    thread, which only reads them. An idle fetcher's background routine also sleeps longer
    between two looks (:data:`ROUTINE_TIMEOUT_S`).
    """
    min_bytes, max_wait = (FETCH_MIN_BYTES, wait_ms) if flowing else IDLE_FETCH
    fetcher._fetch_min_bytes = min_bytes
    fetcher._fetch_max_wait_ms = max_wait
    fetcher._fetcher_timeout = ROUTINE_TIMEOUT_S[0] if flowing else ROUTINE_TIMEOUT_S[1]


def _check_aiokafka_fetcher() -> None:
    from aiokafka.consumer.fetcher import Fetcher

    source = inspect.getsource(Fetcher._get_actions_per_node)
    if any(s not in source for s in ("self._fetch_max_wait_ms,", "self._fetch_min_bytes,",
                                     "backoff = self._fetcher_timeout")):  # fmt: skip
        raise FaustVersionError("aiokafka's Fetcher._get_actions_per_node changed: re-check set_fetch_mode")


_check_aiokafka_fetcher()

# mode names a subclass's logger after its module; keep Faust's, whose level the worker configures.
BatchDrainConsumer.logger = faust_aiokafka.logger


class BatchDrainTransport(faust_aiokafka.Transport):
    """The aiokafka transport creating :class:`BatchDrainConsumer`."""

    Consumer: ClassVar[type[Any]] = BatchDrainConsumer
    fetch_wait: FetchWait = FetchWait(FETCH_MAX_WAIT_MS)
    """What its consumers' fetches wait at most for more records while they flow (``set_fetch_mode``)."""


def install(app: faust.App, batch_wait_ms: int = FETCH_MAX_WAIT_MS, fetch_wait: FetchWait | None = None) -> None:
    """Make ``app`` consume through :class:`BatchDrainConsumer` (call right after creating it).

    ``batch_wait_ms``: the longest a fetch waits for more records while they flow (see
    :data:`FETCH_MAX_WAIT_MS`); ``fetch_wait``: that wait, adapted to a latency budget
    (:mod:`streams.app.fetch_wait`; its floor replaces ``batch_wait_ms``).

    Raises ``RuntimeError`` if the app already built its transport or uses another driver.
    """
    if app._transport is not None:
        raise RuntimeError("install() must run before the app creates its transport")
    urls = list(app.conf.broker_consumer)
    if not all(u.scheme in ("kafka", "aiokafka") for u in urls):
        raise RuntimeError(f"batch drain needs the aiokafka driver, broker is {urls}")
    transport = BatchDrainTransport(urls, app)
    transport.fetch_wait = fetch_wait if fetch_wait is not None else FetchWait(batch_wait_ms)
    app.transport = transport


def route(app: faust.App, topic: str, sink: RecordSink) -> None:
    """Deliver ``topic``'s records to ``sink`` (batch-native) instead of through the conductor.

    The topic must still be subscribed by an agent (its channel iterated), so that
    Faust assigns its partitions, acks its records and commits their offsets.
    """
    consumer = app.consumer
    if not isinstance(consumer, BatchDrainConsumer):
        raise RuntimeError("route() needs the batch drain consumer: call install() first")
    consumer.sinks[topic] = sink
