"""When the indexer yields to the projector (pure): a fresh projector heartbeat more than N records behind."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from projections.critical_gate import projector_behind

NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)


def _row(next_offset: int, end: int, age_s: float, stage: str | None = "project") -> SimpleNamespace:
    return SimpleNamespace(stage=stage, next_offset=next_offset, log_end_offset=end,
                           updated_at=(NOW - timedelta(seconds=age_s)).replace(tzinfo=None))  # fmt: skip


def test_only_a_fresh_projector_heartbeat_far_behind_holds_the_indexer() -> None:
    assert projector_behind([_row(0, 5000, 1.0)], NOW, 2000, 5.0)
    assert not projector_behind([_row(4000, 5000, 1.0)], NOW, 2000, 5.0)  # about a batch: normal
    assert not projector_behind([_row(0, 5000, 30.0)], NOW, 2000, 5.0)  # stale: a stopped projector
    assert not projector_behind([_row(0, 5000, 1.0, stage="index")], NOW, 2000, 5.0)  # the indexer's own row
    assert projector_behind([_row(0, 5000, 1.0, stage=None)], NOW, 2000, 5.0)  # rows from before the stages
    assert projector_behind([_row(4999, 5000, 1.0), _row(0, 9000, 2.0, stage=None)], NOW, 2000, 5.0)
    assert not projector_behind([], NOW, 2000, 5.0)


def test_the_deep_index_stage_never_holds_the_indexer() -> None:
    # The deep stage runs behind the primary one by design: its heartbeat is no projector's.
    assert not projector_behind([_row(0, 5000, 1.0, stage="index-deep")], NOW, 2000, 5.0)


def test_the_deep_index_stage_yields_to_the_primary_index_stage_only() -> None:
    rows = [_row(0, 5000, 1.0), _row(0, 5000, 1.0, stage="index-deep")]
    assert not projector_behind(rows, NOW, 500, 5.0, stage="index")  # the projector's and its own rows: not its gate
    assert projector_behind([*rows, _row(100, 900, 1.0, stage="index")], NOW, 500, 5.0, stage="index")
    assert not projector_behind([_row(100, 900, 30.0, stage="index")], NOW, 500, 5.0, stage="index")  # stale
