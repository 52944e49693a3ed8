"""Faust codecs: agents receive pydantic models (or a ``Rejected`` record), never dicts.

The decoding rules themselves live in :mod:`streams.app.decoding` (no Faust).

The events topic is written by producers we do not control, so its codec
never raises: a record that is not valid JSON, breaks the schema or is too
large decodes to :class:`Rejected`, which the track agent dead-letters with
its coordinates. Internal topics (jobs, summaries) use strict codecs.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from faust.serializers import codecs
from pydantic import BaseModel

from streams.app.decoding import decode_event_record, decode_job_record, decode_summary_record
from streams.app.tracked import TrackedKey

M = TypeVar("M", bound=BaseModel)

EVENTS_CODEC = "distill-events"
JOB_CODEC = "distill-job"
SUMMARY_CODEC = "distill-summary"
STATE_CODEC = "distill-state"
KEY_CODEC = "distill-str"


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


class SummaryRecordCodec(codecs.Codec):
    """Summaries topic: ``SessionSummary``, ``SummaryFailure``, ``SummaryReply`` or ``EpochAdopted``."""

    def _loads(self, s: bytes) -> Any:
        return decode_summary_record(s)

    def _dumps(self, s: Any) -> bytes:
        return dump_model(s)


class JobRecordCodec(codecs.Codec):
    """Jobs topic: ``SummaryJob`` or a forwarded ``AdoptEpoch``."""

    def _loads(self, s: bytes) -> Any:
        return decode_job_record(s)

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
    codecs.register(EVENTS_CODEC, EventRecordCodec(max_bytes=max_record_bytes))
    codecs.register(JOB_CODEC, JobRecordCodec())
    codecs.register(SUMMARY_CODEC, SummaryRecordCodec())
    codecs.register(STATE_CODEC, TrackedKeyCodec())
    codecs.register(KEY_CODEC, StrCodec())
