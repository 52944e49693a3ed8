"""Table values round-trip; unreadable changelog bytes raise a typed error naming the problem."""

from __future__ import annotations

import json

import pytest

from streams.app.codecs import TrackedKeyCodec
from streams.app.tracked import TrackedKey
from streams.rules.errors import CorruptTriggerStateError
from streams.rules.trigger_state import SessionTriggerState, to_dict


def _value() -> TrackedKey:
    return TrackedKey(SessionTriggerState("app", "u", "s", "app/branch"), first_offset=7, partition=2)


def test_round_trip_through_the_codec() -> None:
    codec = TrackedKeyCodec()
    back = codec.loads(codec.dumps(_value()))
    assert isinstance(back, TrackedKey)
    assert (back.key, back.first_offset, back.partition) == (_value().key, 7, 2)
    assert back == _value()


def test_values_are_compact_positional_rows_of_format_2() -> None:
    data = _value().to_bytes()
    assert data.startswith(b'[2,7,2,null,["app","u","s",') and b"{" not in data  # no field names


def test_format_1_values_from_an_older_worker_still_read() -> None:
    value = TrackedKey(SessionTriggerState("app", "u", "s", "app/branch", version=3), first_offset=7, emitted_wall=1.5)
    legacy = json.dumps({"s": to_dict(value.state), "o": 7, "p": None, "w": 1.5}).encode()
    assert TrackedKey.from_bytes(legacy) == value


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"\xff\xfe", "not JSON"),
        (b"{truncated", "not JSON"),
        (b"[1, 2]", "unknown track-state format 1"),
        (b"[2, 1, 2, 3]", "unknown track-state format 2"),
        (b"[]", "unknown track-state format None"),
        (b'[2, null, null, null, ["a", "u"]]', "trigger state row must be a list"),
        (
            b'[2, null, null, null, ["a", "u", "s", "", 0, null, null, [["e1"]], [[0,0,0,0,0],[]], null, null, null]]',
            "a/u/s key '': malformed pending index",
        ),
        (b'{"o": 3}', "no trigger state"),
        (b'{"s": {"v": 1}}', "unknown trigger state format"),
    ],
)
def test_corrupt_values_raise_a_typed_error(raw: bytes, reason: str) -> None:
    with pytest.raises(CorruptTriggerStateError, match=reason):
        TrackedKeyCodec().loads(raw)


def test_non_ascii_ids_and_pending_events_round_trip() -> None:
    from tests.unit.app.test_track_handler import event, feed, handler

    table: dict[str, TrackedKey] = {}
    feed(handler(threshold=1000), table, [event(i, "user" if i % 4 == 1 else "assistant") for i in range(1, 12)])
    for value in table.values():
        assert value.state.pending, "a state with pending events"
        assert TrackedKey.from_bytes(value.to_bytes()) == value
    unicode = TrackedKey(SessionTriggerState("应用", "ユーザー", "séance", "app/分支"), first_offset=1)
    assert TrackedKey.from_bytes(unicode.to_bytes()) == unicode
    assert json.loads(unicode.to_bytes())[4][:3] == ["应用", "ユーザー", "séance"]


def test_integers_beyond_64_bits_round_trip_exactly() -> None:
    from tests.unit.app.test_track_handler import event, feed, handler

    table: dict[str, TrackedKey] = {}
    feed(handler(threshold=1000), table, [event(1, "user", context_window=2**70), event(2)])
    for value in table.values():
        assert TrackedKey.from_bytes(value.to_bytes()) == value


def test_pending_events_are_written_as_json_writes_them_and_read_back() -> None:
    from dataclasses import replace

    from streams.rules.counters import PendingEvent
    from streams.rules.state_rows import state_to_row

    pending = [PendingEvent(f"e{i}", 1_700_000_000_000_000 + i, 5, "", 2, 30 + i) for i in range(3)]
    state = replace(SessionTriggerState("app", "u", "s", ""), pending=pending, content=3)
    value = TrackedKey(state, first_offset=1, partition=0)
    data = value.to_bytes()
    # the layout older workers wrote (the json module writes named tuples as arrays) and read
    row = [2, 1, 0, None, state_to_row(state)]
    assert json.loads(data) == json.loads(json.dumps(row))
    assert TrackedKey.from_bytes(data) == value


def test_the_hot_path_constructor_builds_the_same_frozen_value() -> None:
    import dataclasses

    from streams.app.tracked import tracked_key

    state = SessionTriggerState("app", "u", "s", "app/branch")
    fast = tracked_key(state, 7, 2, 1.5, b"k")
    assert fast == TrackedKey(state, 7, 2, 1.5, b"k") and type(fast) is TrackedKey
    assert [getattr(fast, f.name) for f in dataclasses.fields(TrackedKey)] == [state, 7, 2, 1.5, b"k"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.partition = 3  # type: ignore[misc]
    assert TrackedKeyCodec().loads(TrackedKeyCodec().dumps(fast)) == fast
