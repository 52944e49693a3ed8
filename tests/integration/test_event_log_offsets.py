"""A job's delta read past the byte budget fetches the session's own offsets, not every interleaved record."""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from schemas.settings import Settings
from streams.app.event_log import EventLogReader, RecentEvents
from streams.clients.kafka_config import producer_kwargs
from streams.clients.topics_admin import ensure_topics

pytestmark = pytest.mark.integration

SESSIONS = 300
PER_SESSION = 8


async def _write(settings: Settings) -> list[tuple[int, bytes, bytes]]:
    """``SESSIONS`` interleaved sessions on partition 0: ``(offset, key, value)`` as written."""
    await ensure_topics(settings)
    producer = AIOKafkaProducer(**producer_kwargs(settings.kafka))
    await producer.start()
    written: list[tuple[int, bytes, bytes]] = []
    try:
        futures = []
        for n in range(PER_SESSION):
            for s in range(SESSIONS):
                key, value = f"app/u/s{s}".encode(), f"s{s} event {n} 会话".encode()
                futures.append((key, value, await producer.send(settings.topics.events, value, key=key, partition=0)))
        for key, value, fut in futures:
            written.append(((await fut).offset, key, value))
    finally:
        await producer.stop()
    return written


async def test_a_delta_out_of_the_buffer_reads_only_its_own_records(isolated_settings: Settings) -> None:
    written = await _write(isolated_settings)
    reader = EventLogReader(isolated_settings.kafka, isolated_settings.topics.events)
    reader.recent = RecentEvents(max_bytes=4096)  # the track agent saw everything; values of ~30 records held
    for offset, key, value in written:
        reader.recent.add(0, offset, key, value)
    try:
        key = b"app/u/s17"
        expected = [(o, v) for o, k, v in written if k == key]
        first, last = written[0][0], written[-1][0]
        found = await reader.read(0, first, last, key)
        assert [(e.offset, e.value) for e in found] == expected
        # a seek per record of the session at most: not the 2,400 records of the stretch
        assert reader.records_scanned <= PER_SESSION * 500
        assert reader.records_scanned < len(written)

        # the same read without the index scans the stretch, and finds the same records
        scanner = EventLogReader(isolated_settings.kafka, isolated_settings.topics.events)
        try:
            assert [(e.offset, e.value) for e in await scanner.read(0, first, last, key)] == expected
            assert scanner.records_scanned == len(written)
        finally:
            await scanner.stop()

        # a stretch consumed before the index began is scanned, the rest fetched by offset
        later = EventLogReader(isolated_settings.kafka, isolated_settings.topics.events)
        later.recent = RecentEvents(max_bytes=0)
        middle = len(written) // 2
        for offset, k, value in written[middle:]:
            later.recent.add(0, offset, k, value)
        try:
            assert [(e.offset, e.value) for e in await later.read(0, first, last, key)] == expected
        finally:
            await later.stop()
    finally:
        await reader.stop()


async def test_one_consumer_reads_partitions_in_turn(isolated_settings: Settings) -> None:
    """A pooled consumer moved between partitions (one consumer of each kind) reads each one right,
    by offset and by scan, CJK values included."""
    settings = isolated_settings
    await ensure_topics(settings)
    producer = AIOKafkaProducer(**producer_kwargs(settings.kafka))
    await producer.start()
    written: dict[int, list[tuple[int, bytes, bytes]]] = {0: [], 1: []}
    try:
        for n in range(6):
            for p in (0, 1):
                for s in range(5):
                    key, value = f"app/u/p{p}s{s}".encode(), f"p{p} s{s} 第{n}条".encode()
                    sent = await producer.send_and_wait(settings.topics.events, value, key=key, partition=p)
                    written[p].append((sent.offset, key, value))
    finally:
        await producer.stop()
    reader = EventLogReader(settings.kafka, settings.topics.events, size=1)  # one consumer of each kind
    reader.recent = RecentEvents(max_bytes=0)
    for p, rows in written.items():
        for offset, key, value in rows:
            reader.recent.add(p, offset, key, value)
    scanner = EventLogReader(settings.kafka, settings.topics.events, size=1)
    try:
        for p, s in ((0, 1), (1, 3), (0, 4), (1, 0), (0, 1)):
            key = f"app/u/p{p}s{s}".encode()
            expected = [(o, v) for o, k, v in written[p] if k == key]
            first, last = written[p][0][0], written[p][-1][0]
            assert [(e.offset, e.value) for e in await reader.read(p, first, last, key)] == expected
            assert [(e.offset, e.value) for e in await scanner.read(p, first, last, key)] == expected
    finally:
        await reader.stop()
        await scanner.stop()


async def test_a_session_among_fewer_than_the_read_on_bound_is_read_on_with_one_seek(
    isolated_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A seek drops what the last fetch holds: a session interleaved with 300 others (its records 300
    offsets apart, within ``READ_ON_AT_MOST``) is read on from its first record, not sought to every
    other one (a fetch round trip each: 4.7 → 1.4 ms of CPU per job at 50 sessions, bench_event_log)."""
    written = await _write(isolated_settings)
    seeks: list[int] = []
    seek = AIOKafkaConsumer.seek

    def counted(self: Any, tp: Any, offset: int) -> None:
        seeks.append(offset)
        seek(self, tp, offset)

    monkeypatch.setattr(AIOKafkaConsumer, "seek", counted)
    reader = EventLogReader(isolated_settings.kafka, isolated_settings.topics.events)
    reader.recent = RecentEvents(max_bytes=0)  # the values fell out of the buffer; the offsets are known
    for offset, key, value in written:
        reader.recent.add(0, offset, key, value)
    try:
        key = b"app/u/s17"
        expected = [(o, v) for o, k, v in written if k == key]
        found = await reader.read(0, written[0][0], written[-1][0], key)
        assert [(e.offset, e.value) for e in found] == expected
        assert seeks == [expected[0][0]]
        assert reader.records_scanned == expected[-1][0] - expected[0][0] + 1 < len(written)
    finally:
        await reader.stop()


async def test_many_sessions_out_of_the_buffer_are_read_by_one_scan(isolated_settings: Settings) -> None:
    """A worker learning the event ids of many sessions after a restart (``streams.app.event_ids``): their
    stretches of a partition are read by one scan from the earliest start, each session's records as a
    read of its own would return them — not one scan of the stretch per session."""
    written = await _write(isolated_settings)
    reader = EventLogReader(isolated_settings.kafka, isolated_settings.topics.events)
    reader.recent = RecentEvents(max_bytes=0)  # nothing held: every range is read from Kafka
    first, last = written[0][0], written[-1][0]
    ranges = [(first + s, last - s, f"app/u/s{s}".encode()) for s in (3, 17, 120, 299)]
    try:
        found = await reader.read_keys(0, ranges)
        for (start, end, key), records in zip(ranges, found, strict=True):
            expected = [(o, v) for o, k, v in written if k == key and start <= o <= end]
            assert expected and [(e.offset, e.value) for e in records] == expected
        assert reader.records_scanned == (last - 3) - (first + 3) + 1  # one pass over the stretch
    finally:
        await reader.stop()
