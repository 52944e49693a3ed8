"""The Kafka record key of a session (pure): which keys are accepted, and how they are named.

The key is the producer's: any non-null bytes (``app/user/session`` as the
client writes it, ``app:user:session``, the bare session id, opaque bytes, a key
shared by several sessions). What distill needs is co-partitioning: every
record of a session (events and commands) on one partition, in order. The
producer's partitioner only guarantees that when the session always uses the
same key, so the rule is:

* a record without a key (``null``: the partitioner spreads such records over
  partitions) is refused;
* the first record of a session fixes its key and partition (kept in the
  track state); a later record of that session with another key, or on
  another partition, is refused — naming both keys — instead of being folded
  into a session whose history lives elsewhere.

A refused record goes to the dead-letter topic with the reason (its bytes and
key kept, so it can be re-sent with the right key); nothing else is lost.
"""

from __future__ import annotations

import base64

from schemas.base import SessionKey

RECORD_KEY_ERROR = "RecordKeyError"
"""``error_class`` of a dead letter for a refused key."""


def describe_key(key: bytes | None) -> str:
    """A key as a reason names it: ``null``, the UTF-8 text quoted, else ``base64:…``."""
    if key is None:
        return "null"
    try:
        text = key.decode()
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(key).decode()
    if not text.isprintable():
        return "base64:" + base64.b64encode(key).decode()
    return repr(text)


def stored_key(key: bytes, session: SessionKey) -> bytes | None:
    """How the state keeps ``key``: ``None`` for the canonical ``SessionKey.kafka_key()``."""
    return None if key == session.kafka_key() else key


def key_problem(
    key: bytes | None,
    session: SessionKey,
    *,
    known: bool,
    known_key: bytes | None,
    known_partition: int | None,
    partition: int,
) -> str | None:
    """Why a record of ``session`` with ``key`` on ``partition`` is refused, or ``None``.

    ``known``: the session has a track state, whose key is ``known_key``
    (``None``: canonical) and partition ``known_partition`` (``None``: unknown).
    """
    name = "/".join(session)
    if key is None:
        return (
            f"record of session {name} has no Kafka key (null): a session's records must all carry one "
            f"non-null key so that they share a partition (the client uses {describe_key(session.kafka_key())})"
        )
    if not known:
        return None
    expected = known_key if known_key is not None else session.kafka_key()
    if key != expected:
        return (
            f"record of session {name} has key {describe_key(key)} but the session's records are keyed "
            f"{describe_key(expected)} (its first record's key): every record of a session must carry the same key"
        )
    if known_partition is not None and known_partition != partition:
        return (
            f"record of session {name} (key {describe_key(key)}) arrived on partition {partition} but the "
            f"session's records are on partition {known_partition}: every record of a session must share a partition"
        )
    return None


def encode_key(key: bytes | None) -> str | None:
    """``key`` as it travels in JSON (base64), ``None`` kept."""
    return base64.b64encode(key).decode() if key is not None else None


def decode_key(text: str | None) -> bytes | None:
    return base64.b64decode(text, validate=True) if text is not None else None
