"""Base classes shared by every record."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, NamedTuple, TypeVar

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


_Model = TypeVar("_Model", bound=BaseModel)
_IMMUTABLE_DEFAULT = (type(None), bool, int, float, str, bytes)
_Shape = tuple[tuple[str, ...], tuple[Any, ...]]
_SHAPES: dict[type[BaseModel], _Shape | None] = {}
_set_attribute = object.__setattr__


def _shape(cls: type[BaseModel]) -> _Shape | None:
    """The field names of ``cls`` in order and the defaults of a tail of them, when :func:`construct` may
    build it by hand: no alias, no extra or private attributes, no post-init, not a root model."""
    fields = cls.model_fields  # ``__pydantic_fields__`` since pydantic 2.10; the dependency allows 2.7
    if (
        cls.__pydantic_root_model__
        or cls.__pydantic_post_init__
        or cls.__private_attributes__
        or cls.model_config.get("extra") == "allow"
        or any(f.alias is not None or f.validation_alias is not None for f in fields.values())
    ):
        return None
    defaults: list[Any] = []
    for field in reversed(fields.values()):  # the trailing fields with a constant default
        if field.is_required() or field.default_factory is not None:
            break
        if not isinstance(field.default, _IMMUTABLE_DEFAULT):
            break
        defaults.append(field.default)
    return tuple(fields), tuple(reversed(defaults))


def construct(cls: type[_Model], /, **values: Any) -> _Model:
    """``cls.model_construct(**values)``: the same model (fields, their order, ``model_fields_set``),
    built in a fraction of the time when ``values`` name the fields of ``cls`` in their order, all
    of them or all but some trailing ones with a constant default (the track agent's jobs, built
    per decision). Any other call is ``model_construct``'s own.
    """
    shape = _SHAPES.get(cls, ...)
    if shape is ...:
        shape = _SHAPES[cls] = _shape(cls)
    if shape is not None:
        names, defaults = shape
        given = tuple(values)
        n = len(given)
        if given == names[:n] and len(names) - n <= len(defaults):
            fields_set = set(given)
            for name, default in zip(names[n:], defaults[len(defaults) - (len(names) - n) :], strict=True):
                values[name] = default
            model = cls.__new__(cls)
            _set_attribute(model, "__dict__", values)
            _set_attribute(model, "__pydantic_fields_set__", fields_set)
            _set_attribute(model, "__pydantic_extra__", None)
            _set_attribute(model, "__pydantic_private__", None)
            return model
    return cls.model_construct(**values)


def copy_with(model: _Model, update: dict[str, Any]) -> _Model:
    """``model.model_copy(update=update)``: the same copy (fields, ``model_fields_set``), built directly when
    ``model`` holds no extra fields and no private attributes (a job, a summary: one copy or two per job of
    the track and summarize agents). Any other model is ``model_copy``'s own."""
    if model.__pydantic_extra__ is not None or model.__pydantic_private__ is not None:
        return model.model_copy(update=update)
    out = type(model).__new__(type(model))
    _set_attribute(out, "__dict__", {**model.__dict__, **update})
    _set_attribute(out, "__pydantic_fields_set__", model.__pydantic_fields_set__ | update.keys())
    _set_attribute(out, "__pydantic_extra__", None)
    _set_attribute(out, "__pydantic_private__", None)
    return out


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
    if not value:  # most records carry no context
        return value
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


def utc_instant(value: datetime, name: str) -> datetime:
    """``as_utc(value)`` for a validator of field ``name``: an instant that leaves the calendar once in UTC
    (year 1 at a positive offset) is a ``ValueError``, so pydantic's ``ValidationError`` (a dead letter).

    ``as_utc`` raises ``OverflowError`` there, which pydantic lets through: every reader of the record
    (the projector, the worker's absorb stage, the client's summaries follower) stopped on it, and the
    Cassandra driver raises it too serializing such a value.
    """
    try:
        return as_utc(value)
    except OverflowError:
        raise ValueError(f"{name} is out of range once in UTC (before year 1 or after 9999)") from None


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
