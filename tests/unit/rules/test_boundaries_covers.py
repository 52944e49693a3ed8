"""``covers``: one event known by id, stamp and log position against a boundary (the facade's wait)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from schemas import SummaryBoundary
from streams.rules.boundaries import covers

CUT = datetime(2026, 1, 1, tzinfo=UTC)
B = SummaryBoundary(cutoff_at=CUT, last_event_id="b")


def test_the_boundary_event_is_covered_whatever_its_position() -> None:
    assert covers(B, "b", CUT, None, None) and covers(B, "b", CUT, 9, 5)


def test_log_positions_decide_over_stamps_when_both_are_known() -> None:
    early = CUT - timedelta(seconds=60)  # stamped before the cutoff (another producer's clock ahead)
    assert not covers(B, "e", early, 6, 5)  # logged after the boundary event: the request's
    assert covers(B, "e", CUT + timedelta(seconds=60), 4, 5)  # logged before it: the summary's


def test_without_both_positions_the_stamp_decides_strictly_before_the_cutoff() -> None:
    assert covers(B, "e", CUT - timedelta(milliseconds=1), 6, None)
    assert not covers(B, "e", CUT, None, 5) and not covers(B, "e", CUT + timedelta(seconds=1), None, None)
