"""Where a record came from: topic, partition, offset (logged and put on dead letters)."""

from __future__ import annotations

from typing import NamedTuple


class Coordinates(NamedTuple):
    """The Kafka position of one record."""

    topic: str
    partition: int
    offset: int

    def log_fields(self) -> dict[str, object]:
        return {"topic": self.topic, "partition": self.partition, "offset": self.offset}
