"""The demo session of ``distill demo`` projected into Cassandra, with summaries of three keys at known boundaries.

The events are the bundled demo session (``streams.cli.demo_cmd.load_demo_session``),
written by the real ``Projector`` as ``distill projector`` writes them. The
summaries are records of the summaries topic with boundaries chosen by the
test, so the expected page is known without running a model (the oracle):

- full session: v1 up to ``ev-013`` (the bookings), v2 up to ``ev-035``;
- ``travel-agent/research``: v1 up to ``ev-020``, v2 up to ``ev-023`` (Chinese text, per-character diff);
- ``travel-agent/itinerary``: v1 up to ``ev-029``.

No summary text mentions the flight's PNR ``X7Q2LM`` (``ev-010``/``ev-013``), a
detail the full-session summary hides: ``session_search`` must find it.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from projections.projector import Projector, SourceRecord
from schemas import SessionKey
from schemas.summaries import (
    CallReport,
    SessionSummary,
    SummaryBoundary,
    SummaryReport,
    SummaryStats,
    TriggerReport,
)
from streams.cli.demo_cmd import load_demo_session

RESEARCH = "travel-agent/research"
ITINERARY = "travel-agent/itinerary"
HIDDEN_DETAIL = "X7Q2LM"

FULL_V1 = (
    "Ana Silva and Tom Berg plan a 5-day vegetarian trip to Lisbon (May 12-16, budget 2500 EUR, flying from Berlin). "
    "Booked flight TP1350 for 412 EUR and Alfama Inn for 580 EUR."
)
FULL_V2 = (
    "Ana Silva and Tom Berg plan a 5-day vegetarian trip to Lisbon (May 12-16, budget 2500 EUR, flying from Berlin). "
    "Booked flight TP1350 and Alfama Inn (together 992 EUR). Vegetarian restaurants were researched and Arkhe is "
    "reserved for May 14 at 20:00. Sintra moved to May 14 after Tom's work call (train 12:41), back for dinner."
)
RESEARCH_V1 = (
    "研究代理为阿尔法玛附近的素食餐厅做了调研：Princesa do Castelo 便宜的自助餐，Ao 26 纯素小馆，Arkhe 需提前两周预订。"
)
RESEARCH_V2 = (
    "研究代理为阿尔法玛附近的素食餐厅做了调研：Princesa do Castelo 便宜的自助餐，Ao 26 纯素小馆。"
    "已预订 Arkhe，5月14日20:00。"
)
ITINERARY_V1 = (
    "Day-by-day plan: May 12 Alfama, May 13 Belém, May 14 Gulbenkian and LX Factory with dinner at Arkhe, "
    "May 15 Sintra day trip, May 16 Time Out Market and the flight home at 18:40."
)


@dataclass(frozen=True)
class DemoSeed:
    """What was written: the session key, the ordered event ids, and each key's latest boundary event."""

    key: SessionKey
    event_ids: list[str]
    boundaries: dict[str, str]
    versions: dict[str, int]


def _summary(
    key: SessionKey, filter_key: str, version: int, text: str, upto: dict[str, Any], prev: dict[str, Any] | None,
    covered: int, trigger: TriggerReport, created: datetime,
) -> SessionSummary:  # fmt: skip
    def boundary(ev: dict[str, Any]) -> SummaryBoundary:
        return SummaryBoundary(cutoff_at=datetime.fromisoformat(ev["timestamp"]), last_event_id=ev["event_id"])

    tokens = covered * 42
    out_tokens = max(1, len(text) // 4)
    return SessionSummary(
        app_name=key.app_name, user_id=key.user_id, session_id=key.session_id, filter_key=filter_key,
        summary=text, version=version, previous_version=version - 1 if version > 1 else None,
        boundary=boundary(upto), previous_boundary=boundary(prev) if prev else None,
        model="extractive-demo", prompt_version="demo-1", created_at=created,
        stats=SummaryStats(original_event_count=covered, compressed_event_count=1,
                           compression_ratio=round(covered / 1, 2), original_tokens=tokens,
                           summary_tokens=out_tokens, token_compression_ratio=round(tokens / out_tokens, 2),
                           input_tokens=tokens + 180, output_tokens=out_tokens),
        report=SummaryReport(
            trigger=trigger,
            calls=(CallReport(mode="standalone", model="extractive-demo", estimated_prompt_tokens=tokens + 180,
                              budget_tokens=6000, latency_ms=12.5, completion_tokens=out_tokens),),
            truncated_previous_summary=False,
        ),
        job_id=f"job-{filter_key or 'full'}-{version}",
    )  # fmt: skip


async def seed_demo(projector: Projector, session_id: str) -> DemoSeed:
    """Project the demo events and the summaries (through ``projector.project``, as the Kafka runner does)."""
    records = load_demo_session(session_id)
    first = records[0]
    key = SessionKey(first["app_name"], first["user_id"], session_id)
    by_id = {r["event_id"]: r for r in records}
    offsets = itertools.count(100)
    sink_letters: list[Any] = []

    async def sink(letter: Any) -> None:
        sink_letters.append(letter)

    def source(topic: str, value: bytes) -> SourceRecord:
        return SourceRecord(topic, 0, next(offsets), key.kafka_key(), value, 0)

    await projector.project([source(projector.events_topic, json.dumps(r).encode()) for r in records], sink)
    created = datetime(2026, 5, 2, 10, 0, tzinfo=UTC)
    events = TriggerReport(name="event_threshold", value=13, threshold=10, unit="events")
    plan = [
        ("", 1, FULL_V1, "ev-013", None, 13, events),
        (RESEARCH, 1, RESEARCH_V1, "ev-020", None, 5, TriggerReport(name="token_threshold", value=5120,
                                                                   threshold=4000, unit="tokens")),
        (RESEARCH, 2, RESEARCH_V2, "ev-023", "ev-020", 3, TriggerReport(name="force")),
        (ITINERARY, 1, ITINERARY_V1, "ev-029", None, 6, TriggerReport(name="event_threshold", value=6, threshold=5,
                                                                      unit="events")),
        ("", 2, FULL_V2, "ev-035", "ev-013", 22, TriggerReport(name="manual")),
    ]  # fmt: skip
    summaries = [
        _summary(key, fk, v, text, by_id[upto], by_id[prev] if prev else None, n, trig, created + timedelta(minutes=i))
        for i, (fk, v, text, upto, prev, n, trig) in enumerate(plan)
    ]
    await projector.project([source(projector.summaries_topic, s.model_dump_json().encode()) for s in summaries], sink)
    if sink_letters:
        reasons = [f"{x.source_topic}/{x.source_offset}: {x.reason[:200]}" for x in sink_letters]
        raise AssertionError(f"the projector rejected demo records: {reasons}")
    return DemoSeed(
        key,
        [r["event_id"] for r in records],
        {"": "ev-035", RESEARCH: "ev-023", ITINERARY: "ev-029"},
        {"": 2, RESEARCH: 2, ITINERARY: 1},
    )
