"""Event timestamps: every RFC 3339 form the schema's pattern admits reads as the instant pydantic's
own date-time parser gives, in UTC (``SessionEvent`` parses them itself, see ``_timestamp_rfc3339``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from schemas import SessionEvent
from schemas.base import as_utc
from streams.app.decoding import Rejected, decode_event_record


class _Reference(BaseModel):
    at: datetime


def _event(timestamp: object) -> bytes:
    return json.dumps({"app_name": "a", "user_id": "u", "session_id": "s", "event_id": "e1", "author": "user",
                       "timestamp": timestamp, "message": {"role": "user", "content": "早上好"}}).encode()  # fmt: skip


@st.composite
def rfc3339(draw: st.DrawFn) -> str:
    year = draw(st.integers(1, 9999))
    month = draw(st.integers(1, 12))
    day = draw(st.integers(1, 31))
    clock = f"{draw(st.integers(0, 23)):02d}:{draw(st.integers(0, 59)):02d}:{draw(st.integers(0, 59)):02d}"
    fraction = draw(st.one_of(st.just(""), st.text("0123456789", min_size=1, max_size=9).map(lambda d: "." + d)))
    offset = draw(
        st.one_of(
            st.sampled_from(["", "Z", "z"]),
            st.builds(
                lambda sign, h, m: f"{sign}{h:02d}:{m:02d}",
                st.sampled_from("+-"),
                st.integers(0, 23),
                st.integers(0, 59),
            ),
        )
    )
    sep = draw(st.sampled_from("Tt "))
    return f"{year:04d}-{month:02d}-{day:02d}{sep}{clock}{fraction}{offset}"


@settings(max_examples=600, deadline=None)
@given(rfc3339())
def test_every_pattern_form_reads_as_pydantic_reads_it_in_utc(text: str) -> None:
    try:
        expected = as_utc(_Reference.model_validate_json(json.dumps({"at": text})).at)
    except (ValidationError, OverflowError):
        expected = None  # not a date (30 February) or out of range once in UTC: refused by both
    try:
        got: datetime | None = SessionEvent.model_validate_json(_event(text)).timestamp
    except ValidationError:
        got = None
    assert got == expected, text
    if got is not None:
        assert got.tzinfo is UTC and got.utcoffset() is not None and not got.utcoffset()


@pytest.mark.parametrize("text", ["2026-02-30T09:00:00Z", "0001-01-01T00:30:00+01:00", "2026-05-02T09:00",
                                  "1714640000", "2026-05-02_09:00:00Z", "2026-05-02T09:00:00,5Z",
                                  "2026-05-02T09:00:00Z\n", "２０２６-05-02T09:00:00Z"])  # fmt: skip
def test_what_is_no_rfc3339_date_time_is_refused_naming_the_timestamp(text: str) -> None:
    with pytest.raises(ValidationError, match="timestamp"):
        SessionEvent.model_validate_json(_event(text))
    rejected = decode_event_record(_event(text))
    assert isinstance(rejected, Rejected) and "timestamp" in rejected.reason
    assert f"'{text}'" not in rejected.reason and f'"{text}"' not in rejected.reason  # never quotes the value


def test_a_datetime_given_in_code_is_kept_as_its_instant_in_utc() -> None:
    local = datetime.fromisoformat("2026-05-02T17:00:00+08:00")
    event = SessionEvent.model_validate(json.loads(_event("x")) | {"timestamp": local})
    assert event.timestamp == local and event.timestamp.tzinfo is UTC
    naive = SessionEvent.model_validate(json.loads(_event("x")) | {"timestamp": datetime(2026, 5, 2, 9)})
    assert naive.timestamp == datetime(2026, 5, 2, 9, tzinfo=UTC)
