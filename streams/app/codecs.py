"""Faust codecs: agents receive pydantic models (or a ``Rejected`` record), never dicts.

The events topic is written by producers we do not control, so its codec
never raises: a record that is not valid JSON, breaks the schema or is too
large decodes to :class:`Rejected`, which the track agent dead-letters with
its coordinates. Internal topics (jobs, summaries) use strict codecs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from faust.serializers import codecs
from pydantic import BaseModel, TypeAdapter, ValidationError

from schemas import (
    EventTopicRecord,
    RecordDecodeError,
    SessionEvent,
    SessionSummary,
    SummaryFailure,
    parse_event_record,
)
from streams.app.tracked import TrackedKey

M = TypeVar("M", bound=BaseModel)

EVENTS_CODEC = "distill-events"
JOB_CODEC = "distill-job"
SUMMARY_CODEC = "distill-summary"
STATE_CODEC = "distill-state"
KEY_CODEC = "distill-str"


@dataclass(frozen=True)
class Rejected:
    """A record of the events topic that cannot be processed, and why."""

    raw: bytes
    error_class: str
    reason: str


def decode_event_record(raw: bytes, max_bytes: int) -> EventTopicRecord | Rejected:
    """Validate one events-topic record; never raises."""
    if len(raw) > max_bytes:
        return Rejected(raw, "OversizedRecord", f"record of {len(raw)} bytes exceeds the limit of {max_bytes} bytes")
    try:
        # Fast path: most records are events; pydantic parses and validates the JSON in one
        # step. Anything it does not accept (commands, invalid records) takes the full path,
        # which decides the model or the rejection reason exactly as before.
        return SessionEvent.model_validate_json(raw)
    except ValueError:
        pass
    try:
        return parse_event_record(raw)
    except RecordDecodeError as exc:
        return Rejected(raw, "RecordDecodeError", str(exc))
    except ValidationError as exc:
        return Rejected(raw, "ValidationError", _validation_reason(exc))


def _validation_reason(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False, include_input=False)[:5]:
        loc = ".".join(str(p) for p in err.get("loc", ()))
        parts.append(f"{loc}: {err.get('msg')}")
    return f"schema violation ({exc.error_count()} errors): " + "; ".join(parts)


class EventRecordCodec(codecs.Codec):
    """Events topic: ``SessionEvent`` / commands, or ``Rejected``."""

    def __init__(self, max_bytes: int = 8 * 1024 * 1024, **kwargs: Any) -> None:
        super().__init__(max_bytes=max_bytes, **kwargs)
        self.max_bytes = max_bytes

    def _loads(self, s: bytes) -> Any:
        return decode_event_record(s, self.max_bytes)

    def _dumps(self, s: Any) -> bytes:
        return dump_model(s)


class ModelCodec(codecs.Codec, Generic[M]):
    """One pydantic model type, JSON on the wire."""

    def __init__(self, model: type[M], **kwargs: Any) -> None:
        super().__init__(model=model, **kwargs)
        self.model = model

    def _loads(self, s: bytes) -> Any:
        return self.model.model_validate_json(s)

    def _dumps(self, s: Any) -> bytes:
        return dump_model(s)


_SUMMARY_ADAPTER: TypeAdapter[SessionSummary | SummaryFailure] = TypeAdapter(SessionSummary | SummaryFailure)


def decode_summary_record(raw: bytes) -> SessionSummary | SummaryFailure:
    """A record of the summaries topic (a summary or a failure answer)."""
    data = json.loads(raw)
    if isinstance(data, dict) and data.get("type") == "summary_failure":
        return SummaryFailure.model_validate(data)
    return SessionSummary.model_validate(data)


class SummaryRecordCodec(codecs.Codec):
    """Summaries topic: ``SessionSummary`` or ``SummaryFailure``."""

    def _loads(self, s: bytes) -> Any:
        return decode_summary_record(s)

    def _dumps(self, s: Any) -> bytes:
        return dump_model(s)


class TrackedKeyCodec(codecs.Codec):
    """Table values: the compact trigger state of one ``(session, filter key)``."""

    def _loads(self, s: bytes) -> Any:
        return TrackedKey.from_bytes(s)

    def _dumps(self, s: Any) -> bytes:
        if not isinstance(s, TrackedKey):
            raise TypeError(f"expected TrackedKey, got {type(s).__name__}")
        return s.to_bytes()


class StrCodec(codecs.Codec):
    """UTF-8 text keys (table keys survive a changelog round trip as ``str``)."""

    def _loads(self, s: bytes) -> Any:
        return s.decode()

    def _dumps(self, s: Any) -> bytes:
        return s.encode() if isinstance(s, str) else bytes(s)


def dump_model(value: Any) -> bytes:
    if isinstance(value, BaseModel):
        return value.model_dump_json(exclude_none=False).encode()
    if isinstance(value, bytes):
        return value
    raise TypeError(f"cannot encode {type(value).__name__}")


def register_codecs(max_record_bytes: int) -> None:
    """Register distill's codecs with Faust (idempotent)."""
    from schemas import SummaryJob

    codecs.register(EVENTS_CODEC, EventRecordCodec(max_bytes=max_record_bytes))
    codecs.register(JOB_CODEC, ModelCodec(SummaryJob))
    codecs.register(SUMMARY_CODEC, SummaryRecordCodec())
    codecs.register(STATE_CODEC, TrackedKeyCodec())
    codecs.register(KEY_CODEC, StrCodec())
