"""NaN and ±Infinity are not JSON: a record holding one is refused with the reason, never stored as null."""

from __future__ import annotations

import json

import pytest

from schemas import SessionEvent
from schemas.records import RecordDecodeError, json_object
from streams.app.decoding import Rejected, decode_event_record


def record(extra: str, content: str = "hi") -> bytes:
    return (
        '{"app_name":"a","user_id":"u","session_id":"s","event_id":"e1","timestamp":"2026-01-01T00:00:00Z",'
        f'"author":"user","message":{{"role":"user","content":{json.dumps(content, ensure_ascii=False)}}},'
        f'"extra":{{"sensor":{extra}}}}}'
    ).encode()


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity", "[1.5, NaN]", '{"温度": -Infinity}'])
def test_the_worker_refuses_a_record_holding_a_number_json_does_not_have(token: str) -> None:
    decoded = decode_event_record(record(token))
    assert isinstance(decoded, Rejected), decoded
    assert decoded.error_class == "RecordDecodeError" and "which JSON does not have" in decoded.reason
    assert ("NaN" if "NaN" in token else "Infinity") in decoded.reason


@pytest.mark.parametrize("token", ["NaN", "-Infinity"])
def test_the_projector_parser_refuses_it_too(token: str) -> None:
    with pytest.raises(RecordDecodeError, match="which JSON does not have"):
        json_object(record(token))


def test_text_that_mentions_nan_or_infinity_is_kept_whole() -> None:
    text = "NaN 不是数字; Infinity 是无穷大 — 温度 = NaN?"
    decoded = decode_event_record(record('"NaN"', content=text))
    assert isinstance(decoded, SessionEvent)
    assert decoded.message is not None and decoded.message.content == text
    assert decoded.model_extra == {"extra": {"sensor": "NaN"}}
    assert isinstance(decode_event_record(record("1e308")), SessionEvent)  # large but finite
