"""The one parse-and-judge step of the projector and the indexer (``projections.stage``): an events-topic
record is refused with the worker's class and reason (``streams.app.decoding`` decides the same record), and
judged by its session's key in log order, where a summarize command fixes the key but is never refused."""

from __future__ import annotations

import json
from collections.abc import Iterable

import pytest
from pydantic import ValidationError

from projections.late_events import LatestStamps, Partition
from projections.session_keys import Fixed, KnownKeys
from projections.stage import (
    BatchOutcome,
    CassandraStage,
    CommandItem,
    DeleteItem,
    EventItem,
    SessionItem,
    SourceRecord,
    parse_session_record,
)
from schemas import SessionKey
from schemas.event_ids import FirstDigests, record_digest
from schemas.record_keys import RECORD_KEY_ERROR
from schemas.records import validation_reason
from streams.app.decoding import Rejected, decode_event_record

LIMIT = 2_000
SESSION = {"app_name": "应用", "user_id": "u", "session_id": "s"}
KEY = "应用/u/s".encode()


def _event(n: int, text: str = "你好") -> dict[str, object]:
    return {**SESSION, "event_id": f"e{n}", "timestamp": "2025-01-01T00:00:00Z", "author": "user",
            "message": {"role": "user", "content": text}}  # fmt: skip


def _raw(data: object) -> bytes:
    return json.dumps(data).encode()


REFUSED = {
    "oversized": _raw(_event(1, "x" * LIMIT)),
    "not JSON": b"{not json",
    "a list": b"[1, 2]",
    "NaN": b'{"type": "event", "x": NaN}',
    "lone surrogate": _raw(_event(1, "\ud800")),
    "schema": _raw({**SESSION, "event_id": "e1"}),
    "unknown type": _raw({**SESSION, "type": "no such type"}),
}


@pytest.mark.parametrize("raw", REFUSED.values(), ids=REFUSED.keys())
def test_a_record_the_worker_refuses_is_refused_by_the_stages_with_its_class_and_reason(raw: bytes) -> None:
    worker = decode_event_record(raw, LIMIT)
    assert isinstance(worker, Rejected)
    with pytest.raises(ValueError) as refused:
        parse_session_record(SourceRecord("events", 0, 7, KEY, raw), LIMIT)
    exc = refused.value
    reason = validation_reason(exc) if isinstance(exc, ValidationError) else str(exc)
    assert (type(exc).__name__, reason) == (worker.error_class, worker.reason)


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (_event(1), EventItem),
        ({**SESSION, "type": "delete_session", "command_id": "c"}, DeleteItem),
        ({**SESSION, "type": "summarize", "command_id": "c"}, CommandItem),
        ({**SESSION, "type": "summarize_sync", "command_id": "c", "reply_to": "r"}, CommandItem),
    ],
)  # fmt: skip
def test_a_session_record_is_one_typed_item(data: dict[str, object], kind: type) -> None:
    item = parse_session_record(SourceRecord("events", 0, 7, KEY, _raw(data)), LIMIT)
    assert isinstance(item, kind) and item.session_key == SessionKey("应用", "u", "s")


def test_an_empty_value_is_refused() -> None:
    with pytest.raises(ValueError, match="empty record value"):
        parse_session_record(SourceRecord("events", 0, 7, KEY, None), LIMIT)


class _Stage(CassandraStage):
    """The step alone: nothing fixed in the store, no Cassandra."""

    def __init__(self) -> None:
        self.events_topic = "events"
        self._stamps = LatestStamps()
        self._keys = KnownKeys()
        self._digests = FirstDigests()

    async def _learn_digests(self, sessions: Iterable[tuple[Partition, SessionKey]]) -> None:
        for tp, session in sessions:  # nothing stored: every session starts empty
            if not self._digests.knows(tp, session):
                self._digests.learn(tp, session, {})

    async def _read_record_keys(self, known: KnownKeys, sessions: object) -> dict[SessionKey, Fixed | None]:
        return dict.fromkeys(known.missing(sessions), None)  # type: ignore[arg-type]

    @staticmethod
    def parse(record: SourceRecord) -> SessionItem | None:
        return parse_session_record(record, LIMIT)


async def test_records_are_judged_by_their_sessions_key_in_log_order_and_a_command_is_never_refused() -> None:
    summarize = _raw({**SESSION, "type": "summarize", "command_id": "c"})
    delete = _raw({**SESSION, "type": "delete_session", "command_id": "d"})
    records = [
        SourceRecord("events", 0, 1, None, _raw(_event(1))),  # no key: refused, fixes nothing
        SourceRecord("events", 0, 2, b"other", summarize),  # a command fixes the session's key
        SourceRecord("events", 0, 3, KEY, _raw(_event(3))),  # not the key it fixed: refused
        SourceRecord("events", 0, 4, KEY, summarize),  # a command with another key: not refused
        SourceRecord("events", 0, 5, b"other", _raw(_event(5))),
        SourceRecord("events", 1, 6, b"other", delete),  # another partition: refused
        SourceRecord("events", 0, 7, b"x", b"{not json"),
    ]
    outcome = BatchOutcome()
    parsed, keys = await _Stage()._parse_and_judge(records, outcome, _Stage.parse)
    names = [type(item).__name__ for _, item in parsed]
    assert names == [RECORD_KEY_ERROR, "CommandItem", RECORD_KEY_ERROR, "CommandItem", "EventItem",
                     RECORD_KEY_ERROR, "RecordDecodeError"]  # fmt: skip
    assert "no Kafka key (null)" in str(parsed[0][1]) and "partition 1" in str(parsed[5][1])
    assert [r.offset for r, _ in parsed] == list(range(1, 8))
    assert keys.untaken() == [(SessionKey("应用", "u", "s"), (b"other", 0), 2)]
    assert outcome.offsets == {("events", 0): 8, ("events", 1): 7}


async def test_an_event_id_reused_with_other_content_is_refused_in_log_order_and_a_duplicate_is_not() -> None:
    """``schemas.event_ids`` in the step both stages share: judged after the key, afresh after a deletion."""
    delete = _raw({**SESSION, "type": "delete_session", "command_id": "d"})
    first, other = _raw(_event(1)), _raw(_event(1, "另一个"))
    records = [
        SourceRecord("events", 0, 1, KEY, first),
        SourceRecord("events", 0, 2, KEY, json.dumps(json.loads(first), indent=1).encode()),  # a duplicate
        SourceRecord("events", 0, 3, KEY, other),  # refused
        SourceRecord("events", 0, 4, b"other", other),  # refused for its key first
        SourceRecord("events", 0, 5, KEY, delete),
        SourceRecord("events", 0, 6, KEY, other),  # the session's ids start afresh
        SourceRecord("events", 0, 7, KEY, first),  # refused
    ]
    parsed, _ = await _Stage()._parse_and_judge(records, BatchOutcome(), _Stage.parse)
    names = [type(item).__name__ for _, item in parsed]
    assert names == ["EventItem", "EventItem", "EventIdReused", RECORD_KEY_ERROR, "DeleteItem", "EventItem",
                     "EventIdReused"]  # fmt: skip
    assert "'e1'" in str(parsed[2][1]) and record_digest(first) in str(parsed[2][1])
    assert record_digest(other) in str(parsed[2][1]) and record_digest(first) in str(parsed[6][1])
