"""The consumer-lag gauge: log end minus the committed offset of each assigned partition."""

from __future__ import annotations

from collections import defaultdict

from faust.types import TP
from prometheus_client import REGISTRY

from streams import metrics
from streams.app.factory import consumer_lag


class FakeConsumer:
    def __init__(self) -> None:
        self._committed_offset: dict[TP, int | None] = defaultdict(lambda: None)
        self._read_offset: dict[TP, int | None] = defaultdict(lambda: None)
        self.high = {TP("ev", 0): 100, TP("ev", 1): 7, TP("jobs", 0): 3, TP("other", 0): 9, TP("ev", 2): None}

    def assignment(self) -> set[TP]:
        return set(self.high)

    def highwater(self, tp: TP) -> int | None:
        return self.high[tp]


def test_lag_from_committed_or_read_offsets() -> None:
    c = FakeConsumer()
    c._committed_offset[TP("ev", 0)] = 60
    c._read_offset[TP("ev", 1)] = 6
    rows = sorted(consumer_lag(c, {"ev", "jobs"}))
    assert rows == [("ev", 0, 40), ("ev", 1, 0)]  # jobs/0: nothing read yet; ev/2: no log end yet
    metrics.set_consumer_lag(rows)
    assert REGISTRY.get_sample_value("distill_consumer_lag", {"topic": "ev", "partition": "0"}) == 40
    metrics.set_consumer_lag([])
    assert REGISTRY.get_sample_value("distill_consumer_lag", {"topic": "ev", "partition": "0"}) is None
