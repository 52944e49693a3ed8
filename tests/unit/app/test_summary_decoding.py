"""Decoding a summaries-topic record: the fast path for summaries decides every record as the full one."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from schemas import EpochAdopted, SessionSummary, SummaryFailure, SummaryReply
from schemas.epochs import AdoptedHead
from schemas.records import json_object
from streams.app.decoding import decode_summary_record

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _summary(**update: Any) -> dict[str, Any]:
    record = {
        "app_name": "a", "user_id": "u", "session_id": "s", "filter_key": "f/x", "summary": "text é 日本",
        "version": 3, "previous_version": 2, "epoch": 1,
        "boundary": {"cutoff_at": T0.isoformat(), "last_event_id": "e9"},
        "previous_boundary": {"cutoff_at": T0.isoformat(), "last_event_id": "e4"},
        "model": "m", "prompt_version": "p", "created_at": "2026-01-01T00:00:01.123456Z",
        "report": {"trigger": {"name": "event_threshold"}}, "job_id": "j", "chain_from_offset": 7,
    }  # fmt: skip
    record.update(update)
    return record


def _full_path(raw: bytes) -> object:
    """The decode before the fast path: the JSON object, then the model its ``type`` names."""
    data = json_object(raw)
    kind = data.get("type")
    model = {"summary_failure": SummaryFailure, "summary_reply": SummaryReply, "epoch_adopted": EpochAdopted}
    return model.get(kind, SessionSummary).model_validate(data)  # type: ignore[attr-defined]


summary = SessionSummary.model_validate(_summary())
failure = SummaryFailure(app_name="a", user_id="u", session_id="s", job_id="j", error_class="E", reason="r",
                         created_at=T0)  # fmt: skip
reply = SummaryReply(app_name="a", user_id="u", session_id="s", job_id="j", reply_to="r", summary=summary,
                     created_at=T0)  # fmt: skip
switch = EpochAdopted(app_name="a", user_id="u", session_id="s", epoch=1, previous_epoch=0,
                      heads=(AdoptedHead(summary=summary),), command_id="c", created_at=T0)  # fmt: skip
RECORDS = [
    *(r.model_dump_json().encode() for r in (summary, failure, reply, switch)),
    json.dumps(_summary()).encode(),  # no "type": a summary
    json.dumps(_summary(), ensure_ascii=False, indent=2).encode(),
    b"\xef\xbb\xbf" + json.dumps(_summary()).encode(),  # a BOM: only the json module reads it
    json.dumps(_summary(summary="\ud800 lone")).encode(),  # a lone surrogate: likewise
    json.dumps(_summary(type="summary")).replace('"version": 3', '"version": 3, "version": 4').encode(),
]
REFUSED = [
    json.dumps(_summary(type="something_else")).encode(),
    json.dumps(_summary(unknown=1)).encode(),
    json.dumps(_summary(version=0)).encode(),
    json.dumps(_summary()).encode() + b" trailing",
    b"[1, 2]",
    b"not json",
    b'{"a": ' + b"[" * 5000 + b"]" * 5000 + b"}",  # nested past what either parser reads
]


@pytest.mark.parametrize("raw", RECORDS)
def test_a_record_decodes_to_what_the_full_path_makes(raw: bytes) -> None:
    decoded = decode_summary_record(raw)
    expected = _full_path(raw)
    assert type(decoded) is type(expected) and decoded == expected
    assert decoded.model_fields_set == expected.model_fields_set  # type: ignore[attr-defined]


@pytest.mark.parametrize("raw", REFUSED)
def test_a_refused_record_raises_what_the_full_path_raises(raw: bytes) -> None:
    with pytest.raises(ValueError) as expected:
        _full_path(raw)
    with pytest.raises(ValueError) as refused:
        decode_summary_record(raw)
    assert type(refused.value) is type(expected.value) and str(refused.value) == str(expected.value)
