"""The jobs topic's decoder never raises: a record that is no job is ``Rejected`` with a specific reason
that names no content (the summarize agent dead-letters it and goes on)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from schemas import AdoptEpoch, SummaryJob
from schemas.jobs import JobBoundary
from schemas.summaries import TriggerReport
from streams.app.decoding import Rejected, decode_job_record

T = datetime(2026, 1, 1, tzinfo=UTC)
JOB = SummaryJob(
    job_id="j1", app_name="a", user_id="u", session_id="会话",
    upto=JobBoundary(last_event_id="e1", cutoff_at=T, offset=3),
    trigger=TriggerReport(name="event_threshold"), created_at=T,
)  # fmt: skip


def test_a_job_and_an_epoch_switch_decode() -> None:
    assert decode_job_record(JOB.model_dump_json().encode()) == JOB
    switch = AdoptEpoch(app_name="a", user_id="u", session_id="s", command_id="c", epoch=2)
    assert decode_job_record(switch.model_dump_json().encode()) == switch


@pytest.mark.parametrize(
    ("raw", "error_class", "reason"),
    [
        (None, "RecordDecodeError", "tombstone"),
        (b"", "RecordDecodeError", "not valid JSON"),
        (b"\xff\xfe\x00 not json", "RecordDecodeError", "not valid JSON"),
        (b"{oops", "RecordDecodeError", "not valid JSON"),
        (b'["\xe7\xa7\x98\xe5\xaf\x86"]', "RecordDecodeError", "expected a JSON object, got list"),
        (b'{"job_id": "j", "note": NaN}', "RecordDecodeError", "NaN"),
        (b'{"type": "summary_job", "job_id": "\xe7\xa7\x98\xe5\xaf\x86"}', "ValidationError", "app_name"),
        (JOB.model_dump_json().replace('"upto":{', '"upto":{"extra":"\xe7\xa7\x98\xe5\xaf\x86",').encode(),
         "ValidationError", "upto.extra"),
    ],
)  # fmt: skip
def test_a_record_that_is_no_job_is_rejected_with_the_reason(raw: bytes | None, error_class: str, reason: str) -> None:
    decoded = decode_job_record(raw)
    assert isinstance(decoded, Rejected), decoded
    assert decoded.error_class == error_class and reason in decoded.reason, decoded.reason
    assert decoded.raw == (raw or b"")
    assert "秘密" not in decoded.reason  # the reason is logged: it never quotes the record


def test_the_one_step_path_takes_what_the_json_path_refuses_never() -> None:
    """Jobs are parsed by pydantic in one step first; what the json path refuses is still refused."""
    digits = JOB.model_dump_json().replace('"attempt":0', '"attempt":' + "9" * 4400).encode()
    decoded = decode_job_record(digits)
    assert isinstance(decoded, Rejected) and "digits" in decoded.reason
    nan = JOB.model_dump_json().replace('"attempt":0', '"attempt":NaN').encode()
    assert isinstance(decode_job_record(nan), Rejected)
