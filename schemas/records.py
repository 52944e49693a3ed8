"""The union of every record type on the events topic, and its parser."""

from __future__ import annotations

import json
import math
from typing import Annotated, Any

from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from schemas.commands import DeleteSession, Summarize, SummarizeSync
from schemas.epochs import AdoptEpoch
from schemas.events import SessionEvent

EventTopicRecord = SessionEvent | Summarize | SummarizeSync | DeleteSession | AdoptEpoch

EventRecord = Annotated[EventTopicRecord, Field(discriminator="type")]
"""Any record of the events topic, discriminated by ``type`` (default ``"event"``)."""

_ADAPTER: TypeAdapter[EventTopicRecord] = TypeAdapter(EventRecord)


class RecordDecodeError(ValueError):
    """The bytes are not a JSON object: the reason names what is wrong."""


class OversizedRecord(RecordDecodeError):
    """An events-topic record over ``kafka.max_record_bytes``: the worker refuses it and the projector
    dead-letters it (the class name is the dead letter's ``error_class`` on both sides), so no stage stores or
    summarizes it (the topic takes a little more)."""


def refuse_oversized(raw: bytes | None, limit: int | None) -> None:
    """``OversizedRecord`` when ``raw`` is over ``limit`` bytes (``None``: no limit; no value: nothing to refuse);
    the one check and reason of the worker (``streams.app.decoding``) and the stages (``projections.stage``)."""
    if limit is not None and raw is not None and len(raw) > limit:
        raise OversizedRecord(f"record of {len(raw)} bytes exceeds the limit of {limit} bytes")


def parse_event_record(raw: bytes | str) -> EventTopicRecord:
    """Validate one JSON record of the events topic.

    A missing ``type`` means ``"event"``. Raises ``RecordDecodeError`` for
    bytes that are not a JSON object and ``pydantic.ValidationError`` (which
    names the field and the problem) for a record that breaks the schema.
    """
    return parse_event_data(json_object(raw))


def parse_event_data(data: dict[str, Any]) -> EventTopicRecord:
    """``parse_event_record`` of an already decoded record (``data`` gains ``type`` when it has none)."""
    data.setdefault("type", "event")
    return _ADAPTER.validate_python(data)


def json_object(raw: bytes | str) -> dict[str, Any]:
    """``raw`` as a JSON object; ``RecordDecodeError`` for anything else (bad UTF-8, bad JSON, a list...)."""
    try:
        data = json.loads(raw, parse_constant=_no_constant)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RecordDecodeError(f"not valid JSON: {exc}") from exc
    except RecordDecodeError:
        raise
    except ValueError as exc:
        # An integer past Python's digit limit (``int_max_str_digits``): let through, it stopped the
        # projector's and the indexer's batch at every retry, like the RecursionError below.
        raise RecordDecodeError(f"not readable JSON: {str(exc).split(';')[0]}") from None
    except RecursionError:
        # Not a ValueError: let through, it stopped the projector's and the indexer's batch at every retry.
        raise RecordDecodeError("not readable JSON: arrays or objects nested too deep") from None
    if not isinstance(data, dict):
        raise RecordDecodeError(f"expected a JSON object, got {type(data).__name__}")
    return data


def _no_constant(token: str) -> Any:
    # Python's json (and pydantic) read NaN and ±Infinity, which JSON does not have, and write them
    # back as null: a record holding one would be stored changed. Refused with its reason instead.
    raise RecordDecodeError(
        f"not valid JSON: it holds the number {token}, which JSON does not have (it would be stored as null)"
    )


def validation_reason(exc: ValidationError, limit: int = 5) -> str:
    """A record's schema violations on one line: ``schema violation (N errors): loc: message; ...``.

    Values are never quoted (a dead letter's reason is logged). A value that should be an
    object and is not reads ``expected a JSON object, got <type>``, in JSON and in Python input.
    """
    parts = []
    for err in exc.errors(include_url=False)[:limit]:
        loc = ".".join(str(p) for p in err.get("loc", ()))
        if err.get("type") == "model_type":
            message = f"expected a JSON object, got {type(err.get('input')).__name__}"
        else:
            message = str(err.get("msg"))
        parts.append(f"{loc}: {message}")
    return f"schema violation ({exc.error_count()} errors): " + "; ".join(parts)


__all__ = [
    "EventRecord",
    "EventTopicRecord",
    "OversizedRecord",
    "RecordDecodeError",
    "ValidationError",
    "json_object",
    "parse_event_data",
    "parse_event_record",
    "refuse_oversized",
    "validation_reason",
]


def non_finite_number(value: Any, path: str = "") -> tuple[str, float] | None:
    """The path (``meta.scores[2]``) and value of the first float NaN or ±Infinity in ``value``, else ``None``.

    JSON has no such numbers: pydantic writes them as ``null``, so a record
    carrying one in a producer's extra fields would arrive changed. Walks
    models (their fields and extra fields), dicts, lists and tuples.
    """
    if isinstance(value, float):
        return None if math.isfinite(value) else (path or "the value", value)
    if isinstance(value, BaseModel):
        fields = {name: getattr(value, name) for name in type(value).model_fields}
        return non_finite_number(fields | (value.model_extra or {}), path)
    if isinstance(value, dict):
        for key, item in value.items():
            found = non_finite_number(item, f"{path}.{key}" if path else str(key))
            if found is not None:
                return found
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            found = non_finite_number(item, f"{path}[{i}]")
            if found is not None:
                return found
    return None
