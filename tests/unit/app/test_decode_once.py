"""A job takes the events the track agent decoded while the record buffer holds them.

Records re-read from Kafka (or whose decoded event the buffer let go) are decoded
again, with the same rules; the job's input, and so its cache key, is the same
either way.
"""

from __future__ import annotations

from typing import Any

import pytest

import streams.app.event_ids as event_ids_module
import streams.app.summarize as summarize_module
from schemas import SessionEvent
from schemas.settings import Settings
from streams.app.coordinates import Coordinates
from streams.app.decoding import decode_event_record
from streams.app.event_ids import digests_in
from streams.app.event_log import RawEvent, RecentEvents, decoded_size
from streams.app.summarize import SummarizeHandler
from streams.app.track import TrackHandler
from streams.app.tracked import TrackedKey
from streams.rules.checks import EventThreshold
from streams.rules.policy import PolicySet, SummaryPolicy
from streams.summarizer import SummarizerLike, build_summarizer
from tests.unit.app.test_summarize_handler import EVENTS, MemoryLedger, job
from tests.unit.summarizer.helpers import ScriptedModel

KEY = job(5).events_key()
LIMIT = 1 << 20


class BufferedLog:
    """An events partition read as the worker's reader does: the buffer first, else "Kafka" (bytes only)."""

    def __init__(self, recent: RecentEvents, records: list[RawEvent]) -> None:
        self.recent = recent
        self.records = records
        self.from_kafka = 0

    async def read(self, partition: int, start: int, end: int, key: bytes) -> list[RawEvent]:
        held = self.recent.read(partition, start, end, key)
        if held is not None:
            return held
        self.from_kafka += 1
        return [r for r in self.records if start <= r.offset <= end]


def consumed(recent: RecentEvents) -> list[RawEvent]:
    """``EVENTS`` at offsets 0.., added to ``recent`` as the track agent adds them (with its decode)."""
    records = [RawEvent(i, e.model_dump_json().encode()) for i, e in enumerate(EVENTS)]
    for r in records:
        decoded = decode_event_record(r.value, LIMIT)
        recent.add(0, r.offset, KEY, r.value, decoded if isinstance(decoded, SessionEvent) else None)
    return records


class Recorder:
    """The summarizer, remembering the events each call was given."""

    def __init__(self) -> None:
        self.inner = build_summarizer(Settings(), app_name=EVENTS[0].app_name, model=ScriptedModel(default="s"))
        self.seen: list[list[SessionEvent]] = []
        self.keys: list[str | None] = []

    def cache_key(self, previous: str, events: list[SessionEvent], **kw: Any) -> str | None:
        key = self.inner.cache_key(previous, events, **kw)
        self.keys.append(key)
        return key

    async def summarize(self, previous: str, events: list[SessionEvent], *args: Any, **kw: Any) -> Any:
        self.seen.append(list(events))
        return await self.inner.summarize(previous, events, *args, **kw)

    def metadata(self) -> dict[str, Any]:
        return self.inner.metadata()


async def run(recent: RecentEvents, monkeypatch: pytest.MonkeyPatch) -> tuple[BufferedLog, Recorder, list[bytes], Any]:
    decodes: list[bytes] = []

    def counting(raw: bytes, max_bytes: int | None = None) -> Any:
        decodes.append(raw)
        return decode_event_record(raw, max_bytes)

    records = consumed(recent)
    monkeypatch.setattr(summarize_module, "decode_event_record", counting)
    source, summarizer = BufferedLog(recent, records), Recorder()

    def summarizer_for(app: str) -> SummarizerLike:
        return summarizer

    handler = SummarizeHandler(MemoryLedger(), source, summarizer_for, max_record_bytes=LIMIT)
    result = await handler.handle(job(5), 0)
    return source, summarizer, decodes, result


async def test_a_job_whose_records_are_buffered_takes_the_track_agents_events(monkeypatch: pytest.MonkeyPatch) -> None:
    recent = RecentEvents()
    source, summarizer, decodes, result = await run(recent, monkeypatch)
    assert result.outcome == "summary" and result.events == 6
    assert source.from_kafka == 0
    assert decodes == []  # not one record decoded again
    held = recent.read(0, 0, 5, KEY)
    assert held is not None
    assert all(a is b.event for a, b in zip(summarizer.seen[0], held, strict=True))


async def test_records_re_read_from_kafka_are_decoded_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    buffered = await run(RecentEvents(), monkeypatch)
    monkeypatch.undo()
    source, summarizer, decodes, result = await run(RecentEvents(max_bytes=0), monkeypatch)  # nothing held
    assert source.from_kafka == 1
    assert len(decodes) == 6
    assert result.outcome == "summary" and result.events == 6
    # the same input: the same events, the same cache key
    assert summarizer.seen == buffered[1].seen and summarizer.keys == buffered[1].keys


async def test_a_buffer_that_let_the_decoded_events_go_has_the_bytes_decoded(monkeypatch: pytest.MonkeyPatch) -> None:
    value = EVENTS[0].model_dump_json().encode()
    # room for every record's bytes, not for one decoded event (a quarter of the budget)
    budget = 3 * decoded_size(EVENTS[0], value)
    source, _, decodes, result = await run(RecentEvents(max_bytes=budget), monkeypatch)
    assert source.from_kafka == 0 and len(decodes) == 6
    assert result.outcome == "summary" and result.events == 6


def test_decoded_events_are_let_go_first_and_count_in_the_budget() -> None:
    values = [e.model_dump_json().encode() for e in EVENTS]
    one = decoded_size(EVENTS[0], values[0])
    raw = len(KEY) + len(values[0]) + 96
    # room for two decoded events (a quarter of the budget), and every record's bytes beside them
    recent = RecentEvents(max_bytes=4 * (2 * one + 40))
    assert len(EVENTS) * raw + 2 * one <= recent.max_bytes
    for i, (e, v) in enumerate(zip(EVENTS, values, strict=True)):
        recent.add(0, i, KEY, v, e)
        assert recent._size + recent._decoded_size <= recent.max_bytes
        assert recent._decoded_size <= recent.max_decoded
    held = recent.read(0, 0, len(EVENTS) - 1, KEY)
    assert held is not None and [r.value for r in held] == values
    assert [r.event is not None for r in held] == [False] * (len(EVENTS) - 2) + [True, True]
    assert held[-1].event is EVENTS[-1]
    recent.reset({0})
    assert recent._decoded_size == 0 and recent.read(0, 0, 0, KEY) is None


async def test_the_shared_events_leave_the_track_agent_and_the_job_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    # One object is now read by the track agent and every job taking the record: none may change it.
    recent = RecentEvents()
    records = consumed(recent)
    held = recent.read(0, 0, len(EVENTS) - 1, KEY)
    assert held is not None and all(r.event is not None for r in held)
    track = TrackHandler(PolicySet(SummaryPolicy(checks=(EventThreshold(3),))))
    table: dict[str, TrackedKey] = {}
    for r in held:
        assert r.event is not None
        track.on_record(r.event, Coordinates("ev", 0, r.offset), table, key=KEY, raw=r.value)
    source, summarizer = BufferedLog(recent, records), Recorder()
    handler = SummarizeHandler(MemoryLedger(), source, lambda app: summarizer, max_record_bytes=LIMIT)
    assert (await handler.handle(job(5), 0)).outcome == "summary"
    assert [r.event.model_dump_json().encode() if r.event else b"" for r in held] == [r.value for r in records]


def test_learning_a_sessions_event_ids_takes_the_buffered_events(monkeypatch: pytest.MonkeyPatch) -> None:
    recent = RecentEvents()
    records = consumed(recent)
    decodes: list[bytes] = []

    def counting(raw: bytes, max_bytes: int | None = None) -> Any:
        decodes.append(raw)
        return decode_event_record(raw, max_bytes)

    monkeypatch.setattr(event_ids_module, "decode_event_record", counting)
    held = recent.read(0, 0, len(EVENTS) - 1, KEY)
    assert held is not None
    from_buffer = digests_in(held, EVENTS[0].session_key, LIMIT)
    assert decodes == []
    from_kafka = digests_in(records, EVENTS[0].session_key, LIMIT)  # bytes only: decoded
    assert len(decodes) == len(EVENTS) and from_buffer == from_kafka and len(from_kafka) == len(EVENTS)
