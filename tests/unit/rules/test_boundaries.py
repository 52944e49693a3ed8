from datetime import datetime

from schemas import SummaryBoundary
from streams.rules.boundaries import delta_after, events_after, from_micros, parse_cutoff, to_micros

from .factory import at, ev

EVENTS = [ev("e1", 1), ev("e2", 2), ev("e2b", 2), ev("e3", 3)]


def ids(events: list) -> list[str]:  # type: ignore[type-arg]
    return [e.event_id for e in events]


def test_event_id_boundary_is_exact() -> None:
    assert ids(events_after(EVENTS, SummaryBoundary(cutoff_at=at(2), last_event_id="e2"))) == ["e2b", "e3"]


def test_timestamp_only_boundary_keeps_same_timestamp_events() -> None:
    assert ids(events_after(EVENTS, SummaryBoundary(cutoff_at=at(2)))) == ["e2", "e2b", "e3"]


def test_unknown_event_id_falls_back_to_timestamp() -> None:
    assert ids(events_after(EVENTS, SummaryBoundary(cutoff_at=at(3), last_event_id="gone"))) == ["e3"]


def test_future_boundary_gives_empty_delta() -> None:
    assert events_after(EVENTS, SummaryBoundary(cutoff_at=at(1000))) == []


def test_no_boundary_gives_all() -> None:
    assert ids(events_after(EVENTS, None)) == ids(EVENTS)


def _delta(last_id: str | None, cutoff: datetime | str | None) -> list[str]:
    return ids(
        delta_after(EVENTS, last_id, cutoff, id_of=lambda e: e.event_id, micros_of=lambda e: to_micros(e.timestamp))
    )


def test_invalid_cutoff_gives_all_events() -> None:
    assert _delta(None, "not a time") == ids(EVENTS)
    assert _delta(None, "") == ids(EVENTS)


def test_event_id_wins_when_timestamp_is_invalid() -> None:
    assert _delta("e3", "garbage") == []
    assert _delta("e1", "garbage") == ["e2", "e2b", "e3"]


def test_rfc3339_strings_parse() -> None:
    assert parse_cutoff("2025-01-01T00:00:02Z") == at(2)
    assert _delta(None, "2025-01-01T00:00:02.000000Z") == ["e2", "e2b", "e3"]


def test_micros_roundtrip_exact() -> None:
    value = at(1.000001)
    assert from_micros(to_micros(value)) == value
