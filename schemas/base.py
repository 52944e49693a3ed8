"""Base classes shared by every record."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, NamedTuple

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    WithJsonSchema,
)

SCHEMA_VERSION = 1
"""Current version of every record's ``schema_version`` field."""


class ContractModel(BaseModel):
    """A record distill itself writes: frozen, unknown fields rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class ProducerModel(BaseModel):
    """A record written by producers we do not control.

    Unknown fields are kept (in ``model_extra``) and written back on
    serialization, so a newer producer never breaks an older worker.
    """

    model_config = ConfigDict(frozen=True, extra="allow")
    # No Python validator on the model itself: a ``mode="before"`` one (it only reworded the
    # "not an object" error, see ``schemas.records.validation_reason``) took a third of the time
    # pydantic spends validating an event, on every record of the events topic.


def json_integer(value: Any) -> Any:
    """A before-validator: ``value`` unless it is a string or a boolean (refused with a reason)."""
    # pydantic would also take "5" and true; the exported schema says integer, and so does the parser.
    if isinstance(value, str | bool):
        raise ValueError(f"must be a JSON integer, got {type(value).__name__}")
    return value


WireInt = Annotated[int, BeforeValidator(json_integer)]
"""An integer field of a producer's record: a JSON number with no fraction, never a string or a boolean."""

WireBool = StrictBool
"""A boolean field of a producer's record: ``true`` or ``false``, never ``"true"`` or ``1``."""


CONTEXT_MAX_ENTRIES = 32
CONTEXT_MAX_KEY_CHARS = 64
CONTEXT_MAX_VALUE_CHARS = 1024


def _bounded_context(value: dict[str, str]) -> dict[str, str]:
    if len(value) > CONTEXT_MAX_ENTRIES:
        raise ValueError(f"context holds {len(value)} entries, at most {CONTEXT_MAX_ENTRIES} are allowed")
    for key, item in value.items():
        if not key or len(key) > CONTEXT_MAX_KEY_CHARS:
            raise ValueError(f"context key {key[:80]!r} must be 1..{CONTEXT_MAX_KEY_CHARS} characters")
        if len(item) > CONTEXT_MAX_VALUE_CHARS:
            raise ValueError(f"context value of {key!r} is {len(item)} characters, at most {CONTEXT_MAX_VALUE_CHARS}")
    return value


RequestContext = Annotated[
    dict[str, str],
    AfterValidator(_bounded_context),
    WithJsonSchema(
        {
            "type": "object",
            "maxProperties": CONTEXT_MAX_ENTRIES,
            "propertyNames": {"minLength": 1, "maxLength": CONTEXT_MAX_KEY_CHARS},
            "additionalProperties": {"type": "string", "maxLength": CONTEXT_MAX_VALUE_CHARS},
        }
    ),
]
"""Per-request markers a producer attaches to an event or command (the Go guide's
values in ``ctx``): custom checks read them as ``TriggerView.context`` and the
summarizer (e.g. a dynamic resolver choosing a model or prompt) as its
``context``; they travel on the ``SummaryJob``. Small strings only (bounded)."""


def as_utc(value: datetime) -> datetime:
    """Naive timestamps are taken as UTC; aware ones are converted to UTC."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


class SessionKey(NamedTuple):
    """The identity of a session, and the partitioning key of its records."""

    app_name: str
    user_id: str
    session_id: str

    def kafka_key(self) -> bytes:
        """The canonical Kafka record key: ``app_name/user_id/session_id`` in UTF-8.

        The client keys every record of a session (events and commands) with it,
        so they land on one partition and stay ordered. A producer may use any
        other non-null key instead, as long as every record of the session carries
        the same one (see :mod:`streams.rules.record_keys`).
        """
        return f"{self.app_name}/{self.user_id}/{self.session_id}".encode()


_new_tuple = tuple.__new__


class SessionRecord(ProducerModel):
    """Fields every record of the events topic carries."""

    schema_version: WireInt = SCHEMA_VERSION
    app_name: str = Field(min_length=1)
    user_id: str = Field(min_length=1)
    session_id: str = Field(min_length=1)

    @property
    def session_key(self) -> SessionKey:
        # ``SessionKey(...)`` is a Python-level ``__new__`` around this very call (taken several times per record).
        return _new_tuple(SessionKey, (self.app_name, self.user_id, self.session_id))
