"""An event id names one event (pure): a second record of an id is a duplicate or is refused.

One rule for every stage: the worker's track stage (``streams.app.track``), the
summarize stage reading a delta (``streams.app.summarize``), the projector
(``projections.projector``) and the indexer refuse the same records with the
same reason, so nothing the read side shows is left out of every summary, and
nothing a summary holds is shown with other content.

Within a session (since its last ``delete_session``), the *first* record of an
event id that is accepted fixes the event. A later record of the id

* with the same :func:`record_digest` is the same event published again (a
  producer's retry): a silent duplicate, which changes nothing;
* with another digest is refused (``EventIdReused``, a dead letter naming the
  id and both digests): stored, it would replace or add to what the read side
  shows while the worker summarizes the first record, or be dropped as
  "published again" once a boundary passed the first.

The digest (:func:`record_digest`) covers the whole event as published — its
message (text, tool calls, reasoning, the message's unknown fields), timestamp,
author, filter key, request and invocation ids, flags, error, model, usage,
context and the producer's extra fields — all but ``schema_version`` (a newer
client sending the same event again). It is taken of the record's JSON document
with its keys sorted, so key order and whitespace do not count, and a value
written otherwise (a default spelled out, a timestamp with another offset) does:
every stage computes it from the record's bytes alike, in about a quarter of the
time a validated event's canonical dump takes (the worker does it per event).
The timestamp belongs to it: a re-publish of an event keeps its timestamp (the
client stamps an event once, when it is built), and an id stamped twice would be
two rows on the read side (its rows are clustered by time) for one event in
every summary. Fields that reach no prompt today are covered too: a record that
differs in any of them is not the same event, and what the projector stores of a
duplicate must be what it stored of the first.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Mapping
from hashlib import sha256
from typing import Any

import orjson

from schemas.base import SessionKey
from schemas.events import SessionEvent
from schemas.records import RecordDecodeError

EVENT_ID_REUSED = "EventIdReused"
"""``error_class`` of a dead letter for an event id published again with other content."""


class EventIdReused(RecordDecodeError):
    """An event id of a session published again with other content (:func:`reuse_problem`): the worker and
    the projector refuse it, under this class name on both sides."""


DIGEST_BYTES = 8
"""Digest size: it only tells records *of one id* apart, so 64 bits leave no practical collision."""

_SORTED = orjson.OPT_SORT_KEYS


def record_digest(raw: bytes) -> str:
    """The digest of what an event record says (hex), from its bytes (a JSON object, as every stage accepted
    it): equal for the same event published again, else different (see the module).

    Every stage parses the bytes here with orjson, whatever it decoded them with: orjson reads an integer
    past 64 bits as a float (Python's json keeps it whole), so the stages must read alike. Two records of an
    id that differ only in such an integer's last digits are taken for the same event."""
    try:
        data: dict[str, Any] = orjson.loads(raw)
    except orjson.JSONDecodeError:  # what orjson does not read and the stages do
        data = json.loads(raw)
    data.pop("schema_version", None)  # the parse's own dict
    try:
        body = orjson.dumps(data, option=_SORTED)
    except (orjson.JSONEncodeError, TypeError):
        # What orjson does not write (an integer past 64 bits, nesting past 254): the standard library's form.
        body = json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()
    # sha256, not blake2b: hardware-assisted where the CPU has it, about twice as fast on a 60 KB tool result.
    return sha256(body).hexdigest()[: 2 * DIGEST_BYTES]


def content_digest(event: SessionEvent) -> str:
    """:func:`record_digest` of ``event`` as the client publishes it (for a caller without its bytes)."""
    return record_digest(event.model_dump_json().encode())


def reuse_problem(session: SessionKey, event_id: str, first: str | None, digest: str) -> str | None:
    """Why a record of ``event_id`` with ``digest`` is refused, given the digest ``first`` of the id's first
    accepted record in ``session`` (``None``: none, or not known); ``None``: accepted (new, or a duplicate)."""
    if first is None or first == digest:
        return None
    return (
        f"event id {event_id!r} of session {'/'.join(session)} was published before with other content "
        f"(digest {first}; this record's is {digest}): an event id names one event, the first record of it "
        "is kept — publish new content under a new event id"
    )


DEFAULT_REMEMBERED_IDS = 500_000
"""Event ids a process remembers with their first digest (about 150 bytes each), least recently used
sessions forgotten first; a forgotten session is read again when it comes back."""


class FirstDigests:
    """The first digest of each event id of recently seen sessions, per events partition (bounded).

    What it remembers of a session must be *complete* — every id its log held
    before the record being judged — or a reused id would pass for a new one: a
    session is judged only once :meth:`knows` it, after :meth:`learn` (what the
    caller read of the session: the projector's ``event_ids`` rows, the worker's
    log) and then every record of it the caller judges, in log order. So it is
    remembered only while the caller takes the partition's records one after the
    other: a jump in a partition's offsets (a restart, a seek back, the partition
    handed back after another process advanced it) forgets the partition's
    sessions (:meth:`follow`), which are read again.

    Bounded by ``capacity`` ids in all (least recently used sessions out, the one
    in use kept whatever its size).
    """

    def __init__(self, capacity: int = DEFAULT_REMEMBERED_IDS) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._next: dict[Hashable, int] = {}
        self._run: dict[Hashable, int] = {}
        self._sessions: OrderedDict[tuple[Hashable, Hashable], tuple[int, dict[str, str]]] = OrderedDict()
        self._size = 0

    def follow(self, partition: Hashable, offset: int) -> None:
        """Record that ``offset`` of ``partition`` is judged now (every record of it, in order).

        The record just followed, followed again, is no jump: judged again against a memory that holds
        it, it gets the same answer (its id's first digest is its own, or the one that refused it)."""
        if self._next.get(partition) not in (offset, offset + 1):
            self._run[partition] = self._run.get(partition, 0) + 1  # what was learnt before may be incomplete
        self._next[partition] = offset + 1

    def knows(self, partition: Hashable, session: Hashable) -> bool:
        found = self._sessions.get((partition, session))
        return found is not None and found[0] == self._run.get(partition, 0)

    def next_offset(self, partition: Hashable) -> int | None:
        """The offset of ``partition`` judged next: every record before it was (``None``: none yet)."""
        return self._next.get(partition)

    def first(self, partition: Hashable, session: Hashable) -> Mapping[str, str] | None:
        """Event id → first digest of ``session`` as known (``None``: not known)."""
        found = self._sessions.get((partition, session))
        if found is None or found[0] != self._run.get(partition, 0):
            return None
        return found[1]

    def learn(self, partition: Hashable, session: Hashable, first: Mapping[str, str]) -> None:
        """Remember ``first`` (event id → first digest: all the session's log held so far)."""
        self._set((partition, session), dict(first))

    def forget(self, partition: Hashable, session: Hashable) -> None:
        """``session`` was deleted: it has no event (later records of it start afresh)."""
        self._set((partition, session), {})

    def judge(self, partition: Hashable, session: SessionKey, event_id: str, digest: str) -> str | None:
        """Why a record of ``session`` with ``event_id`` and ``digest`` is refused (:func:`reuse_problem`);
        remembers a new id. The session must be known (:meth:`knows`)."""
        key = (partition, session)
        found = self._sessions.get(key)
        if found is None or found[0] != self._run.get(partition, 0):
            raise KeyError(f"session {session!r} is not known on partition {partition!r}")
        self._sessions.move_to_end(key)
        ids = found[1]
        first = ids.get(event_id)
        if first is None:
            ids[event_id] = digest
            self._size += 1
            self._trim()
            return None
        return reuse_problem(session, event_id, first, digest)

    def _set(self, key: tuple[Hashable, Hashable], ids: dict[str, str]) -> None:
        old = self._sessions.pop(key, None)
        if old is not None:
            self._size -= len(old[1])
        self._sessions[key] = (self._run.get(key[0], 0), ids)
        self._size += len(ids)
        self._trim()

    def _trim(self) -> None:
        while self._size > self.capacity and len(self._sessions) > 1:
            _, (_, ids) = self._sessions.popitem(last=False)
            self._size -= len(ids)


def first_digests(records: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Event id → first digest of ``records`` (``(event id, digest)`` in log order): the first record wins."""
    out: dict[str, str] = {}
    for event_id, digest in records:
        out.setdefault(event_id, digest)
    return out


__all__ = [
    "DEFAULT_REMEMBERED_IDS", "DIGEST_BYTES", "EVENT_ID_REUSED", "EventIdReused", "FirstDigests", "content_digest",
    "first_digests", "record_digest", "reuse_problem",
]  # fmt: skip
