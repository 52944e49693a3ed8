"""The worker and the projector refuse the same records as unstorable (``schemas.storable``).

A record only the projector refused (a lone UTF-16 surrogate: no UTF-8 column holds it) was accepted by
the worker, which fixed the session's Kafka key from it while the projector fixed the next record's: from
then on the two refused opposite records, and one side's accepted events were shown and never summarized
(or summarized and never shown).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from projections.session_keys import KnownKeys, SessionKeys
from schemas import SessionKey
from schemas.records import RecordDecodeError
from schemas.storable import MAX_KEY_BYTES, refuse_unstorable
from streams.app.coordinates import Coordinates
from streams.app.decoding import Rejected, decode_event_record
from tests.unit.app.test_track_handler import handler

SESSION = SessionKey("app", "u", "会话-1")


def _event(n: int, text: str, **fields: Any) -> bytes:
    record = {
        **{"type": "event", "app_name": SESSION.app_name, "user_id": SESSION.user_id},
        **{"session_id": SESSION.session_id, "event_id": f"e{n}", "author": "user"},
        **{"timestamp": f"2026-01-01T00:00:{n:02d}Z", "message": {"role": "user", "content": text}, **fields},
    }
    # json.dumps writes a lone surrogate as the escape "\ud800", as another producer's JSON may hold it
    return json.dumps(record).encode()


def _projector_refuses(raw: bytes) -> bool:
    try:
        refuse_unstorable(raw)
    except RecordDecodeError:
        return True
    return False


CORPUS = {
    "lone surrogate in the text": (_event(1, "bad \ud800 text"), True),
    "lone low surrogate, upper-case escape": (_event(1, "x").replace(b'"x"', b'"\\uDC00"'), True),
    "lone surrogate in a metadata key": (_event(1, "ok", metadata={"k\udfff": 1}), True),
    "lone surrogate in a command": (
        json.dumps(
            {"type": "summarize", "app_name": "app", "user_id": "u", "session_id": "s", "filter_key": "\ud800"}
        ).encode(),
        True,
    ),
    "session id over Cassandra's key limit": (_event(1, "ok", session_id="长" * (MAX_KEY_BYTES // 3 + 1)), True),
    "an emoji written as two escapes": (_event(1, "\ud83d\ude00 fine"), False),
    "an escaped backslash before 'ud'": (_event(1, "C:\\udata\\file"), False),
    "CJK text": (_event(1, "预算是五千元，周五前完成。"), False),
    "a long record with a short key": (_event(1, "字" * (MAX_KEY_BYTES // 2)), False),
}


@pytest.mark.parametrize("name", CORPUS)
def test_the_worker_refuses_what_the_projector_cannot_store(name: str) -> None:
    raw, unstorable = CORPUS[name]
    assert _projector_refuses(raw) is unstorable, "the corpus entry is not what it says"
    decoded = decode_event_record(raw)
    assert isinstance(decoded, Rejected) is unstorable
    if unstorable:
        assert isinstance(decoded, Rejected) and decoded.error_class == "RecordDecodeError"


def test_a_first_record_only_one_side_refused_no_longer_fixes_different_keys() -> None:
    """The review's sequence: the session's first record is unstorable and keyed K1, then K2, then K1."""
    records = [(_event(1, "bad \ud800"), b"K1"), (_event(2, "hello"), b"K2"), (_event(3, "hello again"), b"K1")]
    worker, table = handler(threshold=100), {}
    keys = SessionKeys(KnownKeys(), {})
    for offset, (raw, key) in enumerate(records):
        out = worker.on_record(decode_event_record(raw), Coordinates("ev", 0, offset), table, key=key, raw=raw)
        worker_took = out.dead_letter is None
        projector_took = not _projector_refuses(raw) and keys.judge(key, 0, offset, SESSION, fixes=True) is None
        assert worker_took == projector_took, f"offset {offset}: worker {worker_took}, projector {projector_took}"
