"""A replay's summary-cache preload: one deadline for all its topics, read together, what it gave up named.

Every job of a replay waits for the preload (an unchanged replay calls no model only if the cache is
full). Read topic after topic, each bounded at 60 s, a topic that never reached its end held every job
for a minute per topic, and the topics after it were not read meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import TopicPartition

from schemas.settings import KafkaSettings, Settings
from streams.app import factory, ledger
from streams.app.cache import SummaryCache
from streams.app.headers import INPUT_HASH
from tests.unit.app.test_ledger_replies import summary

STUCK = TopicPartition("s.replay-e1", 0)
LIVE = TopicPartition("s", 0)


class FakeConsumer:
    """``LIVE`` holds two summary records; ``STUCK`` says it ends at 5 but never yields a record (a partition
    whose fetches fail, a slow broker)."""

    def __init__(self, **_: Any) -> None:
        self.records = {LIVE: [summary(1, 1, "a"), summary(2, 3, "b")], STUCK: []}
        self.ends = {LIVE: 2, STUCK: 5}
        self.positions: dict[TopicPartition, int] = {}
        self.stopped = False

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        self.stopped = True

    def assign(self, tps: list[TopicPartition]) -> None:
        self.positions = dict.fromkeys(tps, 0)

    async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.ends[tp] for tp in tps}

    async def seek_to_beginning(self, *tps: TopicPartition) -> None:
        for tp in tps:
            self.positions[tp] = 0

    async def getmany(self, *tps: TopicPartition, timeout_ms: int, max_records: int) -> dict[TopicPartition, list[Any]]:
        out: dict[TopicPartition, list[Any]] = {}
        for tp in tps:
            pending = self.records[tp][self.positions[tp] :]
            if pending:
                out[tp] = [
                    SimpleNamespace(
                        value=s.model_dump_json().encode(), headers=[(INPUT_HASH, f"h{s.version}".encode())]
                    )
                    for s in pending
                ]
                self.positions[tp] += len(pending)
        if not out:
            await asyncio.sleep(timeout_ms / 1000)
        return out

    async def position(self, tp: TopicPartition) -> int:
        return self.positions[tp]


@pytest.fixture()
def consumer(monkeypatch: pytest.MonkeyPatch) -> FakeConsumer:
    made = FakeConsumer()
    monkeypatch.setattr(ledger, "AIOKafkaConsumer", lambda **kw: made)

    async def readable(kafka: Any, topics: Any, report: ledger.Preload) -> list[TopicPartition]:
        return [tp for topic in topics for tp in (STUCK, LIVE) if tp.topic == topic]

    monkeypatch.setattr(ledger, "_readable_partitions", readable)
    return made


def test_a_topic_that_never_reaches_its_end_holds_the_preload_no_longer_than_its_bound_nor_the_others(
    consumer: FakeConsumer,
) -> None:
    cache = SummaryCache()
    # The stuck topic is listed first: read topic after topic, the live one would wait for it.
    report = asyncio.run(ledger.preload_cache(KafkaSettings(), [STUCK.topic, LIVE.topic], cache, timeout_s=0.5))
    assert report.entries == 2 and len(cache) == 2
    assert cache.get("h2") is not None
    assert list(report.given_up) == ["s.replay-e1[0]"]
    assert "not read to its end" in report.given_up["s.replay-e1[0]"]
    assert consumer.stopped


def test_the_preload_is_bounded_as_a_whole_with_the_listing_of_its_topics_and_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A listing that never answers (a broker that does not) ends at the one deadline; jobs then go on."""

    async def never(*_: Any, **__: Any) -> list[str]:
        await asyncio.Event().wait()
        return []

    monkeypatch.setattr(factory, "summary_topics", never)
    caplog.set_level(logging.INFO, logger="streams.app.factory")
    report = asyncio.run(factory.preload_summaries(Settings(), "s", "s.replay-e2", SummaryCache(), timeout_s=0.3))
    assert report.entries == 0
    assert list(report.given_up) == ["s[*]"]
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in warned] == [
        "summary cache preload gave up on partitions: their summaries are made again"
    ]
    assert "s[*]" in warned[0].__dict__["partitions"]
    done = [r for r in caplog.records if r.getMessage() == "summary cache preloaded"]
    assert len(done) == 1 and done[0].__dict__["entries"] == 0


def test_the_preload_logs_its_topics_entries_and_seconds(
    consumer: FakeConsumer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def listed(*_: Any, **__: Any) -> list[str]:
        return [LIVE.topic]

    monkeypatch.setattr(factory, "summary_topics", listed)
    caplog.set_level(logging.INFO, logger="streams.app.factory")
    report = asyncio.run(factory.preload_summaries(Settings(), "s", "s.replay-e2", SummaryCache(), timeout_s=5))
    assert report.entries == 2 and not report.given_up
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    (done,) = [r for r in caplog.records if r.getMessage() == "summary cache preloaded"]
    assert (done.__dict__["topics"], done.__dict__["entries"], done.__dict__["given_up"]) == ("s", 2, 0)
    assert done.__dict__["seconds"] >= 0


def test_a_preload_whose_topics_could_not_be_described_gives_up_every_topic_and_says_why(
    consumer: FakeConsumer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aiokafka.errors import KafkaConnectionError

    async def unreachable(kafka: Any, topics: Any, report: ledger.Preload) -> list[TopicPartition]:
        raise KafkaConnectionError("no broker")

    monkeypatch.setattr(ledger, "_readable_partitions", unreachable)
    cache = SummaryCache()
    report = asyncio.run(ledger.preload_cache(KafkaSettings(), [LIVE.topic, STUCK.topic], cache, timeout_s=5))
    assert report.entries == 0 and len(cache) == 0
    assert report.given_up == {"s[*]": "KafkaConnectionError", "s.replay-e1[*]": "KafkaConnectionError"}
    assert consumer.stopped
