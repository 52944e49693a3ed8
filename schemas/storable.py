"""What no Cassandra row can hold (pure): the one storability rule of every stage.

The projector and the indexer cannot write a record whose text holds a lone
UTF-16 surrogate, or whose session key is over Cassandra's key limit; the
worker refuses the same records (``streams.app.decoding``), so the two sides
refuse alike: a record one side accepted and the other refused would fix the
session's Kafka key on one side only (``schemas.record_keys``), and from then
on the two would refuse opposite records — one shown and never summarized.
"""

from __future__ import annotations

from collections.abc import Mapping

from schemas.records import RecordDecodeError, json_object

MAYBE_SURROGATE = b"\\ud"
MAYBE_SURROGATE_UPPER = b"\\uD"


def refuse_lone_surrogates(value: object, path: str = "") -> None:
    """``RecordDecodeError`` naming the first string of ``value`` holding a lone UTF-16 surrogate.

    The json module decodes ``"\\ud800"`` into a string no UTF-8 column can
    store: the driver (and the stored JSON) would fail on it at every retry
    of the batch. A paired surrogate (an emoji written as two escapes) is
    fine. Only records holding a ``\\ud…`` escape are walked.
    """
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise RecordDecodeError(f"{path or 'the record'} holds a lone UTF-16 surrogate: {exc.reason}") from exc
    elif isinstance(value, dict):
        for key, item in value.items():
            refuse_lone_surrogates(key, path)
            refuse_lone_surrogates(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            refuse_lone_surrogates(item, f"{path}[{i}]")


MAX_KEY_BYTES = 65535
"""Cassandra's limit on one key component; the driver packs each partition-key part's length in 16 bits."""
PARTITION_KEY_FIELDS = ("app_name", "user_id", "session_id")


def refuse_oversized_partition_key(data: object) -> None:
    """``RecordDecodeError`` naming a session-key field over ``MAX_KEY_BYTES`` in UTF-8.

    No row of such a session can be written or even routed (the driver fails
    before sending); a record naming it goes to the dead letters instead of
    failing its batch at every retry.
    """
    if not isinstance(data, Mapping):
        return
    for name in PARTITION_KEY_FIELDS:
        value = data.get(name)
        if isinstance(value, str) and len(value) > MAX_KEY_BYTES // 4:
            size = len(value.encode("utf-8", "surrogatepass"))
            if size > MAX_KEY_BYTES:
                raise RecordDecodeError(
                    f"{name} is {size} bytes in UTF-8, over Cassandra's key limit ({MAX_KEY_BYTES})"
                )


def refuse_surrogates_in(raw: bytes, data: object = None) -> None:
    """``RecordDecodeError`` when the record ``raw`` (decoded: ``data``, else decoded here) holds a lone
    surrogate; costs a substring search unless ``raw`` holds a ``\\ud…`` escape."""
    # A record without a backslash (no escape at all) is passed by one memchr: each escape's substring
    # search costs several times that.
    if b"\\" in raw and (MAYBE_SURROGATE in raw or MAYBE_SURROGATE_UPPER in raw):
        refuse_lone_surrogates(json_object(raw) if data is None else data)


def refuse_oversized_session_key(raw: bytes, data: object) -> None:
    """``RecordDecodeError`` when the record ``raw`` (decoded: ``data``, a dict or a model with the session
    fields) names a session key over ``MAX_KEY_BYTES``; only a record longer than that can."""
    if len(raw) > MAX_KEY_BYTES:
        if not isinstance(data, Mapping):
            data = {name: getattr(data, name, None) for name in PARTITION_KEY_FIELDS}
        refuse_oversized_partition_key(data)


def refuse_unstorable(raw: bytes, data: object = None) -> None:
    """``RecordDecodeError`` when the record ``raw`` (decoded: ``data``, else decoded here) holds text no
    column can store, or a session key no partition can have (the projector's and the indexer's check; the
    worker's decoder makes the same two, :func:`refuse_surrogates_in` before it decodes and
    :func:`refuse_oversized_session_key` after). Costs a substring search unless ``raw`` holds a ``\\ud…``
    escape or is longer than a key may be."""
    if len(raw) > MAX_KEY_BYTES:
        refuse_oversized_session_key(raw, json_object(raw) if data is None else data)
    refuse_surrogates_in(raw, data)
