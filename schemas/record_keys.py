"""The Kafka record key of a session (pure): which keys are accepted, and how they are named.

One rule for every stage: the worker's track stage (``streams.app.track``) and
the projector (``projections.projector``) refuse the same records with the same
reason, so nothing the read side shows is left out of every summary.

The key is the producer's: any non-null bytes (``app/user/session`` as the
client writes it, ``app:user:session``, the bare session id, opaque bytes, a key
shared by several sessions). What distill needs is co-partitioning: every
record of a session (events and commands) on one partition, in order. The
producer's partitioner only guarantees that when the session always uses the
same key, so the rule is:

* a record without a key (``null``: the partitioner spreads such records over
  partitions) is refused;
* the session's first accepted record that *fixes* a key (an event or a
  ``summarize`` / ``summarize_sync`` command: :func:`fixes_session_key`; a
  ``delete_session`` or ``adopt_epoch`` does not) fixes its key and partition;
  a later record of that session with another key, or on another partition,
  is refused — naming both keys — instead of being folded into a session
  whose history lives elsewhere. The worker keeps the fixed key in the track
  state, the projector in ``session_record_keys`` (both outlive a
  ``delete_session``, so both sides judge every later record alike). Within a
  partition "first" is the lowest offset, on both sides, in a replay too; for
  records of one session sent to two partitions at once it is whichever each
  side reads first, which may differ (see the README's "Record keys").

A refused record goes to the dead-letter topic with the reason (its bytes and
key kept, so it can be re-sent with the right key); nothing else is lost.
"""

from __future__ import annotations

import base64
from typing import TypeGuard

from schemas.base import SessionKey
from schemas.commands import Summarize, SummarizeSync
from schemas.events import SessionEvent
from schemas.records import RecordDecodeError


class RecordKeyError(RecordDecodeError):
    """A record of a session without a Kafka key, or with another key or partition than the session's
    (:func:`key_problem`): the worker and the projector refuse it, under this class name on both sides."""


RECORD_KEY_ERROR = RecordKeyError.__name__
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


def key_problem(
    key: bytes | None,
    session: SessionKey,
    canonical: bytes,
    *,
    known: bool,
    known_key: bytes | None,
    known_partition: int | None,
    partition: int,
) -> str | None:
    """Why a record of ``session`` with ``key`` on ``partition`` is refused, or ``None``.

    ``canonical`` is ``session.kafka_key()`` (computed once by the caller: this runs
    for every record). ``known``: the session has a track state, whose key is
    ``known_key`` (``None``: canonical) and partition ``known_partition`` (``None``: unknown).
    """
    if key is None:
        return (
            f"record of session {'/'.join(session)} has no Kafka key (null): a session's records must all carry "
            f"one non-null key so that they share a partition (the client uses {describe_key(canonical)})"
        )
    if not known:
        return None
    expected = canonical if known_key is None else known_key
    if key != expected:
        return (
            f"record of session {'/'.join(session)} has key {describe_key(key)} but the session's records are "
            f"keyed {describe_key(expected)} (its first record's key): every record of a session must carry the "
            "same key"
        )
    if known_partition is not None and known_partition != partition:
        return (
            f"record of session {'/'.join(session)} (key {describe_key(key)}) arrived on partition {partition} "
            f"but the session's records are on partition {known_partition}: every record of a session must share "
            "a partition"
        )
    return None


def fixes_session_key(record: object) -> bool:
    """Whether ``record`` (an events-topic record, decoded), when accepted for a session that has no key
    yet, fixes the session's key and partition: an event or a ``summarize`` / ``summarize_sync`` command."""
    return isinstance(record, SessionEvent) or only_fixes_key(record)


def only_fixes_key(record: object) -> TypeGuard[Summarize | SummarizeSync]:
    """Whether ``record`` (an events-topic record, decoded) is, to the Cassandra stages, only a claim on its
    session's key: a ``summarize`` / ``summarize_sync`` command fixes the key (:func:`fixes_session_key`), but
    it is the worker's, which refuses (dead-letters, answers) it for its key; the stages store nothing of it
    and never dead-letter it."""
    return isinstance(record, Summarize | SummarizeSync)
