"""Table values round-trip; unreadable changelog bytes raise a typed error naming the problem."""

from __future__ import annotations

import pytest

from streams.app.codecs import TrackedKeyCodec
from streams.app.tracked import TrackedKey
from streams.rules.errors import CorruptTriggerStateError
from streams.rules.trigger_state import SessionTriggerState


def _value() -> TrackedKey:
    return TrackedKey(SessionTriggerState("app", "u", "s", "app/branch"), first_offset=7, partition=2)


def test_round_trip_through_the_codec() -> None:
    codec = TrackedKeyCodec()
    back = codec.loads(codec.dumps(_value()))
    assert isinstance(back, TrackedKey)
    assert (back.key, back.first_offset, back.partition) == (_value().key, 7, 2)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"\xff\xfe", "not JSON"),
        (b"{truncated", "not JSON"),
        (b"[1, 2]", "no trigger state"),
        (b'{"o": 3}', "no trigger state"),
        (b'{"s": {"v": 1}}', "unknown trigger state format"),
    ],
)
def test_corrupt_values_raise_a_typed_error(raw: bytes, reason: str) -> None:
    with pytest.raises(CorruptTriggerStateError, match=reason):
        TrackedKeyCodec().loads(raw)
