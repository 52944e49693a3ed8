"""Per-request context on events and commands: bounded, validated with a clear reason."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from schemas import SessionEvent, Summarize, SummarizeSync
from schemas.base import CONTEXT_MAX_ENTRIES, CONTEXT_MAX_VALUE_CHARS
from schemas.records import parse_event_record

BASE = {"app_name": "a", "user_id": "u", "session_id": "s"}
EVENT = {**BASE, "event_id": "e1", "timestamp": "2026-01-01T00:00:00Z", "author": "user",
         "message": {"role": "user", "content": "hi"}}  # fmt: skip


def test_context_defaults_to_empty_and_round_trips() -> None:
    assert SessionEvent.model_validate(EVENT).context == {}
    record = parse_event_record(json.dumps({**EVENT, "context": {"entry": "async"}}))
    assert isinstance(record, SessionEvent) and record.context == {"entry": "async"}
    command = parse_event_record(json.dumps({**BASE, "type": "summarize", "command_id": "c", "context": {"k": "v"}}))
    assert isinstance(command, Summarize) and command.context == {"k": "v"}
    sync = SummarizeSync(**BASE, command_id="c", reply_to="r", context={"model": "small"})
    assert SummarizeSync.model_validate_json(sync.model_dump_json()).context == {"model": "small"}


@pytest.mark.parametrize(
    ("context", "reason"),
    [
        ({f"k{i}": "v" for i in range(CONTEXT_MAX_ENTRIES + 1)}, "at most 32 are allowed"),
        ({"k": "v" * (CONTEXT_MAX_VALUE_CHARS + 1)}, "at most 1024"),
        ({"": "v"}, "must be 1..64 characters"),
        ({"k": 3}, "valid string"),
    ],
)
def test_oversized_or_non_string_context_is_rejected_with_the_reason(context: object, reason: str) -> None:
    with pytest.raises(ValidationError, match=reason):
        parse_event_record(json.dumps({**EVENT, "context": context}))
