"""Decoding the records of distill's topics: pure, no Faust (the client and the CLI use it too).

The events topic is written by producers we do not control, so its decoder
never raises: a record that is not valid JSON, breaks the schema or is too
large decodes to :class:`Rejected`, with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError

from schemas import (
    AdoptEpoch,
    EpochAdopted,
    EventTopicRecord,
    RecordDecodeError,
    SessionEvent,
    SessionSummary,
    SummaryFailure,
    SummaryJob,
    SummaryReply,
    parse_event_record,
)
from schemas.records import json_object, refuse_oversized, validation_reason
from schemas.storable import refuse_oversized_session_key, refuse_surrogates_in

SummaryRecord = SessionSummary | SummaryFailure | SummaryReply | EpochAdopted
"""A record of the summaries topic: every consumer handles the four (a reply and a switch are no summary)."""


@dataclass(frozen=True)
class Rejected:
    """A record of the events topic that cannot be processed, and why."""

    raw: bytes
    error_class: str
    reason: str


_validate_event_json = SessionEvent.__pydantic_validator__.validate_json
"""``SessionEvent.model_validate_json`` without its Python wrapper (once per record of the events topic)."""


def decode_event_record(raw: bytes, max_bytes: int | None = None) -> EventTopicRecord | Rejected:
    """Validate one events-topic record (at most ``max_bytes``; ``None``: any size); never raises."""
    # What the projector refuses (too large: schemas.records; what it cannot store: schemas.storable) is refused
    # here too: accepted by one side only, such a record would fix its session's Kafka key on that side alone.
    # A substring search for most records.
    try:
        refuse_oversized(raw, max_bytes)
        refuse_surrogates_in(raw)
        record = _decode(raw)
        if not isinstance(record, Rejected):
            refuse_oversized_session_key(raw, record)
    except RecordDecodeError as exc:  # OversizedRecord among them: the class names the dead letter
        return Rejected(raw, type(exc).__name__, str(exc))
    return record


def _decode(raw: bytes) -> EventTopicRecord | Rejected:
    # The one-byte scans (memchr) first: a record without an "N" (an "I") holds no "NaN" ("Infinity").
    if (b"N" not in raw or b"NaN" not in raw) and (b"I" not in raw or b"Infinity" not in raw):
        try:
            # Fast path: most records are events; pydantic parses and validates the JSON in one
            # step. Anything it does not accept (commands, invalid records) takes the full path,
            # which decides the model or the rejection reason exactly as before. pydantic reads
            # NaN and Infinity (not JSON; written back as null): a record that may hold one takes
            # the full path, whose parser refuses them (and takes them inside strings for text).
            event: SessionEvent = _validate_event_json(raw)
            return event
        except Exception:  # the full path below decides, and names, every refusal
            pass
    try:
        return parse_event_record(raw)
    except RecordDecodeError as exc:  # named by its class, as the projector's dead letter of it is
        return Rejected(raw, type(exc).__name__, str(exc))
    except ValidationError as exc:
        return Rejected(raw, type(exc).__name__, validation_reason(exc))
    except Exception as exc:
        # A validator failing other than with a ValueError (an OverflowError converting a timestamp
        # at year 1 to UTC did): raised here, the worker stopped on the record and met it again at
        # every restart. A record is never the end of the pipeline.
        return Rejected(raw, type(exc).__name__, f"record refused by the schema's validators: {type(exc).__name__}")


def decode_summary_record(raw: bytes) -> SummaryRecord:
    """A record of the summaries topic: a summary, a failure answer, a reply naming a summary or an epoch switch.

    Raises a ``ValueError`` for anything else (``RecordDecodeError``: not a JSON object, nested too deep
    to read; pydantic's ``ValidationError``): its readers skip such a record, they never stop on it.
    """
    try:
        # Fast path: most records are summaries, which pydantic parses and validates in one step
        # (half the time of ``json.loads`` and a validation of the dict). Anything it does not
        # accept (another record type, a refused record, JSON only the json module reads: a BOM,
        # a lone surrogate; nesting past its depth) takes the path below, which decides and names
        # every outcome as before.
        return SessionSummary.model_validate_json(raw)
    except ValueError:
        pass
    data = json_object(raw)
    kind = data.get("type")
    if kind == "summary_failure":
        return SummaryFailure.model_validate(data)
    if kind == "summary_reply":
        return SummaryReply.model_validate(data)
    if kind == "epoch_adopted":
        return EpochAdopted.model_validate(data)
    return SessionSummary.model_validate(data)


JOB_FAST_PATH_BYTES = 4096
"""Jobs-topic records shorter than this are first parsed as a job in one step (:func:`decode_job_record`);
shorter than Python's digit limit (4300), they hold no integer the json path refuses."""


def decode_job_record(raw: bytes | None) -> SummaryJob | AdoptEpoch | Rejected:
    """A record of the jobs topic: a summary job, or an epoch switch the track agent forwarded; never raises.

    The worker writes the topic, but a record written by hand, another tool or an older build can
    be anything: it decodes to :class:`Rejected` with the reason (the summarize agent dead-letters
    it and goes on; raised, it crashed the agent, which stopped every partition's jobs until its
    restart, and left no trace of the record but a log line quoting it).
    """
    if raw is None:
        return Rejected(b"", "RecordDecodeError", "empty record value (a tombstone) on the jobs topic")
    if len(raw) < JOB_FAST_PATH_BYTES and b"NaN" not in raw and b"Infinity" not in raw:
        try:
            # Fast path: a job as the worker writes it, parsed and validated by pydantic in one step
            # (half the time of ``json.loads`` and a validation of the dict). Anything it does not
            # accept takes the path below, which decides and names every outcome as before: NaN
            # and Infinity (pydantic reads them, the json path refuses them) and, by the size
            # bound, an integer past Python's digit limit never take this one.
            return SummaryJob.model_validate_json(raw)
        except Exception:
            pass
    try:
        data = json_object(raw)
        if data.get("type") == "adopt_epoch":
            return AdoptEpoch.model_validate(data)
        return SummaryJob.model_validate(data)
    except RecordDecodeError as exc:
        return Rejected(raw, "RecordDecodeError", str(exc))
    except ValidationError as exc:
        return Rejected(raw, "ValidationError", validation_reason(exc))
    except Exception as exc:  # a validator failing otherwise: never the end of the jobs stream
        return Rejected(raw, type(exc).__name__, f"record refused by the schema's validators: {type(exc).__name__}")
