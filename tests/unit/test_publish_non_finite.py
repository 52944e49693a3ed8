"""A float NaN or Infinity in a producer's extra fields is refused at publish, naming the field.

JSON has no such numbers: serialized, the value silently became ``null``.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from schemas import SessionEvent
from schemas.records import non_finite_number
from schemas.settings import Settings
from streams.client import DistillClient, encode_record
from streams.errors import InvalidRecordError, NonFiniteNumberError


def event(event_id: str = "e1", **extra: Any) -> SessionEvent:
    return SessionEvent.model_validate(
        {
            "app_name": "app", "user_id": "u", "session_id": "s", "event_id": event_id,
            "timestamp": "2026-01-01T00:00:00Z", "author": "agent",
            "message": {"role": "assistant", "content": "好的", **extra.pop("message_extra", {})}, **extra,
        }
    )  # fmt: skip


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        ({"producer": {"score": math.nan}}, "producer.score"),
        ({"producer": {"latencies": [0.5, math.inf]}}, "producer.latencies[1]"),
        ({"native": {"record": {"state": {"温度": -math.inf}}}}, "native.record.state.温度"),
        ({"message_extra": {"logprobs": [{"p": math.nan}]}}, "message.logprobs[0].p"),
    ],
)
def test_a_non_finite_number_is_refused_naming_its_field(fields: dict[str, Any], path: str) -> None:
    record = event(**fields)
    with pytest.raises(NonFiniteNumberError, match="JSON has no NaN or Infinity") as caught:
        encode_record(record)
    assert caught.value.path == path
    assert isinstance(caught.value, InvalidRecordError)


def test_finite_numbers_are_published_as_they_are() -> None:
    record = event(producer={"score": 0.25, "big": 1e308, "n": 3, "ok": True, "none": None})
    assert non_finite_number(record) is None
    expected = {"score": 0.25, "big": 1e308, "n": 3, "ok": True, "none": None}
    assert json.loads(encode_record(record))["producer"] == expected


class RecordingProducer:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    async def send(self, topic: str, value: bytes, key: bytes) -> Any:
        self.sent.append(value)

        async def done() -> None:
            return None

        return done()


async def test_a_batch_holding_one_is_not_published_at_all() -> None:
    client = DistillClient(Settings())
    producer = RecordingProducer()
    client._producer = producer  # type: ignore[assignment]
    with pytest.raises(NonFiniteNumberError):
        await client.publish_many([event("e1"), event("e2", producer={"x": math.nan}), event("e3")])
    assert producer.sent == []
