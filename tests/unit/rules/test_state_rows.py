"""The positional row form of the trigger state: round trip, and a typed error naming what is unreadable."""

import json

import pytest

from streams.errors import InvalidRecordError
from streams.rules.boundaries import to_micros
from streams.rules.errors import CorruptTriggerStateError
from streams.rules.state_rows import state_from_row, state_to_row
from streams.rules.trigger_state import SessionTriggerState, mark_emitted, on_summary

from .factory import at, ev, summary
from .test_trigger_state import fold, request


def _state() -> SessionTriggerState:
    events = [*request("r1", 0, answers=2), ev("b1", 5, key="app/b", model="gpt-4o", context_window=1000)]
    call = {"id": "call-1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    events.append(ev("c1", 6, role="assistant", tool_calls=[call]))
    state = on_summary(fold(events), summary(1, "r1-u", 0))
    state = mark_emitted(state, "job", "c1", to_micros(at(6)))
    state.high_offset = 41
    return state


def _json_round_trip(row: object) -> list[object]:
    back = json.loads(json.dumps(row))
    assert isinstance(back, list)
    return back


def test_every_field_survives_a_json_round_trip() -> None:
    state = _state()
    assert state.scopes and state.in_flight is not None and state.own.activity.open_calls  # all parts used
    assert state_from_row(_json_round_trip(state_to_row(state))) == state


def test_a_fresh_state_round_trips() -> None:
    state = fold([])
    assert state_from_row(_json_round_trip(state_to_row(state))) == state


@pytest.mark.parametrize(
    ("index", "value", "message"),
    [
        (2, 7, r"malformed session_id: expected a string"),
        (4, "1", r"malformed version: expected an integer"),
        (7, [["e3", 3]], r"malformed pending index"),
        (7, None, r"malformed pending index"),
        (8, [[1, 2]], r"malformed own scope"),
        (8, [[1, 2, 3, 4, 5], [1]], r"malformed own scope"),
        (9, {"app/b": 3}, r"malformed branch scopes"),
        (10, [1, 2, 3, 4, 5, 6, 7], r"malformed in-flight job"),
        (10, ["j", "e1", 5, 0, None, "far"], r"malformed in-flight job: offset must be an integer"),
        (10, ["j", "e1", "noon", 0], r"malformed in-flight job: emitted_at must be an integer"),
    ],
)
def test_a_malformed_part_raises_a_typed_error_naming_it(index: int, value: object, message: str) -> None:
    row = _json_round_trip(state_to_row(_state()))
    row[index] = value
    with pytest.raises(CorruptTriggerStateError, match=message) as info:
        state_from_row(row)
    assert isinstance(info.value, InvalidRecordError) and isinstance(info.value, ValueError)
    assert "app/u/s" in str(info.value) or index == 2


@pytest.mark.parametrize("row", [{"a": 1}, [1, 2, 3], None])
def test_a_row_of_the_wrong_shape_is_rejected(row: object) -> None:
    with pytest.raises(CorruptTriggerStateError, match="list of 12 to 17 fields"):
        state_from_row(row)


def test_the_answers_offset_survives_both_forms_and_old_rows_read_without_it() -> None:
    from streams.rules.trigger_state import from_dict, to_dict

    state = on_summary(fold([*request("r1", 0, answers=2)]), summary(1, "r1-u", 0), offset=41)
    assert state.answered_at == 41
    row = json.loads(json.dumps(state_to_row(state)))
    assert len(row) == 16 and row[15] == 41
    assert state_from_row(row) == state
    assert from_dict(json.loads(json.dumps(to_dict(state)))).answered_at == 41
    assert state_from_row(row[:12]).answered_at is None  # a row written before the field
    assert on_summary(state, summary(2, "r1-u", 0), offset=41) is state  # delivered again: ignored


def test_the_deletion_offset_survives_both_forms_and_old_rows_read_without_it() -> None:
    from dataclasses import replace

    from streams.rules.trigger_state import from_dict, to_dict

    state = replace(fold([*request("r1", 0, answers=2)]).copy(), deleted_at=7)
    row = json.loads(json.dumps(state_to_row(state)))
    assert len(row) == 17 and row[16] == 7 and row[12:16] == [None, None, None, None]
    assert state_from_row(row) == state
    assert from_dict(json.loads(json.dumps(to_dict(state)))).deleted_at == 7
    assert state_from_row(row[:16]).deleted_at is None  # a row written before the field
    assert from_dict({k: v for k, v in to_dict(state).items() if k != "dl"}).deleted_at is None
