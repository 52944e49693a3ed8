"""Binding rows to prepared statements at half the driver's cost (the stages' hot path).

``PreparedStatement.bind`` builds a column-encryption descriptor (a named
tuple) for every value of every row and looks up the encryption policy before
serializing it; ``BatchStatement.add`` then computes the routing key of every
statement added, although a batch only keeps the first. On the projector's
path that was a fifth of its CPU per event. A :class:`RowBinder` serializes a
row with the column types' own ``serialize`` (what ``bind`` calls in the
end), so the bytes on the wire are the same
(``tests/integration/test_binding.py`` compares them with the driver's).
Statements using column encryption are refused: they need the driver's path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from itertools import chain
from typing import Any

from cassandra.cqltypes import DateType, ListType, SetType, UTF8Type, VarcharType
from cassandra.marshal import int32_pack, int64_pack
from cassandra.query import BatchStatement, BatchType, BoundStatement, PreparedStatement

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SECOND = timedelta(seconds=1)


def serialize_timestamp(value: Any, protocol_version: int) -> bytes:
    """``DateType.serialize`` for datetimes, without its ``utctimetuple``/``timegm`` round trip.

    The same milliseconds: the driver takes the whole seconds since the epoch
    (floored), adds the microseconds as a fraction of a millisecond, and
    truncates. Memoized: an event's timestamp is in every row it makes.
    Anything but a datetime goes to the driver's serializer.
    """
    if not isinstance(value, datetime):
        return DateType.serialize(value, protocol_version)  # type: ignore[no-any-return]
    return _timestamp_bytes(value)


@lru_cache(maxsize=8192)
def _timestamp_bytes(value: datetime) -> bytes:
    aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    seconds = (aware - _EPOCH) // _SECOND
    return int64_pack(int(seconds * 1e3 + value.microsecond / 1e3))  # type: ignore[no-any-return]


def serialize_text_collection(items: Any, protocol_version: int) -> bytes:
    """``SetType(VarcharType).serialize`` (and ``ListType``'s): a count, then each item's length and UTF-8.

    The driver writes each item through a ``BytesIO`` and the item type's
    ``to_binary``, about a microsecond an item: a recall row's token set
    holds up to thousands.
    """
    if isinstance(items, str) or protocol_version < 3:
        raise TypeError("Received a string for a type that expects a sequence")
    encoded = list(map(str.encode, items))  # UTF-8
    # map/zip/chain iterate in C: no bytecode per item.
    pieces = chain.from_iterable(zip(map(int32_pack, map(len, encoded)), encoded, strict=True))
    return int32_pack(len(encoded)) + b"".join(pieces)  # type: ignore[no-any-return]


def _serializer(column_type: Any) -> Callable[[Any, int], bytes]:
    if column_type is DateType:
        return serialize_timestamp
    if (
        isinstance(column_type, type) and issubclass(column_type, SetType | ListType)
        and tuple(getattr(column_type, "subtypes", ())) in ((VarcharType,), (UTF8Type,))
    ):  # fmt: skip
        return serialize_text_collection
    serialize: Callable[[Any, int], bytes] = column_type.serialize
    return serialize


class RowBinder:
    """Serializes rows (plain tuples in the statement's column order, ``None`` for null) for ``prepared``."""

    __slots__ = ("_serializers", "_version", "prepared", "query_id")

    def __init__(self, prepared: PreparedStatement) -> None:
        if prepared.column_encryption_policy is not None:
            raise ValueError("RowBinder does not support column encryption: bind with the driver")
        self.prepared = prepared
        self.query_id = prepared.query_id
        self._version = prepared.protocol_version
        self._serializers = tuple(_serializer(column.type) for column in prepared.column_metadata)

    def values(self, row: Sequence[Any]) -> list[bytes | None]:
        """The serialized values of ``row`` (exactly ``len(column_metadata)`` of them)."""
        if len(row) != len(self._serializers):
            raise ValueError(f"{len(row)} values for a statement of {len(self._serializers)} columns")
        version, serializers = self._version, self._serializers
        return [None if v is None else serialize(v, version) for serialize, v in zip(serializers, row, strict=True)]

    def bound(self, row: Sequence[Any]) -> BoundStatement:
        """A ``BoundStatement`` of ``row`` (what ``prepared.bind(row)`` returns)."""
        statement = BoundStatement(self.prepared)
        statement.values = self.values(row)
        return statement


def batch_of(entries: Sequence[tuple[RowBinder, Sequence[Any]]]) -> BatchStatement | BoundStatement:
    """One statement for ``entries``: the bound statement itself for one, else an unlogged batch.

    The batch routes by its first statement (as ``BatchStatement.add`` would:
    it keeps the first routing key), so the statements of a batch should
    share a partition, or at least its replicas.
    """
    first_binder, first_row = entries[0]
    first = first_binder.bound(first_row)
    if len(entries) == 1:
        return first
    batch = BatchStatement(batch_type=BatchType.UNLOGGED)
    batch.add(first)
    append = batch._statements_and_parameters.append  # what ``add`` appends, minus the per-statement routing key
    for binder, row in entries[1:]:
        append((True, binder.query_id, binder.values(row)))
    return batch
