"""JSON Python's parser cannot read although it is valid — nested deeper than it goes (``RecursionError``,
no ``ValueError``), an integer past its digit limit (a ``ValueError`` that is no ``JSONDecodeError``) — is
a record every reader refuses with the reason, like any other bad JSON: none stops on it."""

from __future__ import annotations

import json
import logging

import pytest
from pydantic import ValidationError

from projections.projector import parse_summary_record
from schemas import SessionKey
from schemas.records import RecordDecodeError, json_object
from streams.app.decoding import Rejected, decode_event_record, decode_job_record, decode_summary_record
from streams.client import _records
from tests.unit.test_client_records import FakeConsumer, Msg, summary

DEEP = b'{"type": "summary", "extra": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
HUGE_INT = b'{"type": "summary", "extra": 1' + b"0" * 5000 + b"}"
UNREADABLE = pytest.mark.parametrize(("raw", "reason"), [(DEEP, "nested too deep"), (HUGE_INT, "5001 digits")])


@UNREADABLE
def test_the_parser_of_every_stage_refuses_it_with_the_reason(raw: bytes, reason: str) -> None:
    with pytest.raises(RecordDecodeError, match=reason):
        json_object(raw)  # the projector's and the indexer's


@UNREADABLE
def test_the_worker_dead_letters_it_as_bad_json(raw: bytes, reason: str) -> None:
    for decoded in (decode_event_record(raw), decode_job_record(raw)):
        assert isinstance(decoded, Rejected)
        assert decoded.error_class == "RecordDecodeError" and reason in decoded.reason


@UNREADABLE
def test_a_summaries_record_raises_a_value_error_its_readers_skip(raw: bytes, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        decode_summary_record(raw)  # the worker's absorb stage catches ValueError


async def test_the_clients_summaries_follower_skips_it(caplog: pytest.LogCaptureFixture) -> None:
    session = SessionKey("app", "u1", "s1")
    msgs = [Msg("sum", 0, 0, b"k", DEEP), Msg("sum", 0, 1, b"k", summary())]
    caplog.set_level(logging.WARNING, logger="streams.client")
    got = [r async for r in _records(FakeConsumer(msgs), session, True)]  # type: ignore[arg-type]
    assert [r.summary for r in got] == ["text"]  # type: ignore[union-attr]
    assert [r.__dict__["offset"] for r in caplog.records if r.levelno == logging.WARNING] == [0]


def test_a_summary_whose_cutoff_leaves_the_calendar_in_utc_is_a_schema_violation() -> None:
    """Year 1 at +01:00 is before year 1 in UTC: the conversion raised OverflowError, which pydantic lets
    through (no ValidationError): the projector and the worker's absorb stage stopped on the record."""
    data = json.loads(summary())
    data["boundary"]["cutoff_at"] = "0001-01-01T00:30:00+01:00"
    raw = json.dumps(data).encode()
    with pytest.raises(ValidationError, match="cutoff_at is out of range once in UTC"):
        decode_summary_record(raw)
    with pytest.raises(ValidationError, match="cutoff_at is out of range once in UTC"):
        parse_summary_record(raw)
