"""The table value of the track agent: trigger state of one ``(session, filter key)``.

Besides the rules' :class:`SessionTriggerState` (counts and the pending-event
index, never content) it remembers ``first_offset``: the events-topic offset
of the first event of the session (full-session entry only). A job carries it
so the summarize side can read a key's first delta straight from the log.

Bytes (the changelog value): ``[2, first_offset, partition, emitted_wall, row]``
with the state's positional row (:mod:`streams.rules.state_rows`), and a sixth
element, the base64 record key, only when the session's key is not the
canonical one (so rows of canonically keyed sessions read as before). Format 1,
``{"s": <to_dict object>, "o": .., "p": .., "w": ..}``, is still read, so a
changelog written by an older worker recovers.
"""

from __future__ import annotations

import base64
import json
import operator
from dataclasses import dataclass, fields

import orjson

from streams.rules.errors import CorruptTriggerStateError
from streams.rules.state_rows import ROW_FORMAT, state_from_row, state_to_row
from streams.rules.trigger_state import SessionTriggerState, from_dict

KEY_SEPARATOR = "\x1f"
_plain = operator.itemgetter(slice(None))
"""A named tuple's fields as a plain tuple."""
_json_encode = json.JSONEncoder(separators=(",", ":"), check_circular=False).encode


CACHED_FROM = 8
"""Pending indexes at least this long keep their encoding (shorter ones cost little to redo)."""


def _pending_json(state: SessionTriggerState) -> orjson.Fragment | list[tuple[object, ...]]:
    """``state.pending`` for ``orjson.dumps``: encoded once per entry, not at every write.

    Every event appends to its key's pending index and rewrites the key's changelog row, so
    encoding the whole index each time costs O(n) Python-level work per write. The encoding
    of the entries written so far is kept on the state (``state.encoded``) and only the new
    ones are encoded (the bytes are still copied per write: a memcpy, not an encode). The
    price is memory: each key with ``CACHED_FROM`` or more pending entries holds about the
    JSON size of its index once more (a store that decodes a fresh state per read, RocksDB,
    gains only within a batch). The cache is used while ``pending`` is the very list it was made
    from, no shorter, and still holds the last entry encoded (the rules only ever append to a
    list in place, and give a state a new list for anything else). Named tuples become plain
    ones first (a C-level slice each), which orjson writes itself, without a ``default`` call
    per entry.
    """
    pending = state.pending
    n = len(pending)
    if n < CACHED_FROM:
        state.encoded = None
        return list(map(_plain, pending))
    cached = state.encoded
    # The last entry encoded is checked too (O(1)): a list emptied and grown again is caught.
    if cached is not None and cached[0] is pending and cached[1] <= n and pending[cached[1] - 1] is cached[2]:
        done, body = cached[1], cached[3]
        if done < n:
            body = body + b"," + orjson.dumps(list(map(_plain, pending[done:])))[1:-1]
    else:
        body = orjson.dumps(list(map(_plain, pending)))[1:-1]
    state.encoded = (pending, n, pending[-1], body)
    return orjson.Fragment(b"[" + body + b"]")


def _record_key(raw: list[object]) -> bytes | None:
    if len(raw) < 6:
        return None
    text = raw[5]
    try:
        if not isinstance(text, str):
            raise ValueError(f"expected a base64 string, got {type(text).__name__}")
        return base64.b64decode(text, validate=True)
    except ValueError as exc:
        raise CorruptTriggerStateError(f"track-state record key is unreadable: {exc}") from exc


def table_key(app_name: str, user_id: str, session_id: str, filter_key: str) -> str:
    """The table key of ``(session, filter key)``."""
    return KEY_SEPARATOR.join((app_name, user_id, session_id, filter_key))


def split_table_key(key: str) -> tuple[str, str, str, str]:
    app, user, session, filter_key = key.split(KEY_SEPARATOR, 3)
    return app, user, session, filter_key


@dataclass(frozen=True, slots=True)
class TrackedKey:
    """What the table stores per key."""

    state: SessionTriggerState
    first_offset: int | None = None
    partition: int | None = None
    """Events-topic partition of the session (the sweep sends its commands there)."""
    emitted_wall: float | None = None
    """Wall-clock time (s) the in-flight job was emitted: the sweep's job timeout."""
    record_key: bytes | None = None
    """The Kafka key of the session's records (:mod:`streams.rules.record_keys`); ``None``: the
    canonical ``SessionKey.kafka_key()``. Its jobs read their delta, and the sweep sends its
    commands, with this key."""

    @property
    def key(self) -> str:
        s = self.state
        return table_key(s.app_name, s.user_id, s.session_id, s.filter_key)

    def to_bytes(self) -> bytes:
        # orjson: a changelog record per changed key per batch, ~4x cheaper than the json module.
        state = state_to_row(self.state)
        row: list[object] = [ROW_FORMAT, self.first_offset, self.partition, self.emitted_wall, state]
        if self.record_key is not None:
            row.append(base64.b64encode(self.record_key).decode())
        try:
            state[7] = _pending_json(self.state)
            return orjson.dumps(row, default=list)
        except TypeError:  # an integer beyond 64 bits (e.g. a huge context_window): json writes any int
            state[7] = list(map(_plain, self.state.pending))
            return _json_encode(row).encode()

    @classmethod
    def from_bytes(cls, data: bytes | str) -> TrackedKey:
        """Read a table value back; ``CorruptTriggerStateError`` says which part is unreadable.

        During changelog recovery this error is not swallowed: the worker stops
        with it rather than rebuilding a key from nothing, which could silently
        drop never-summarized events from that key's first summary. The way out
        is a replay (fresh changelog), which rebuilds every state from the log.
        """
        try:
            # json, not orjson: read back exactly, integers beyond 64 bits included (orjson: floats).
            raw = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CorruptTriggerStateError(f"track-state value is not JSON: {exc}") from exc
        if isinstance(raw, list):
            if len(raw) not in (5, 6) or raw[0] != ROW_FORMAT:
                found = raw[0] if raw else None
                raise CorruptTriggerStateError(f"unknown track-state format {found!r} (this build reads 1 and 2)")
            first_offset, partition, emitted_wall, row = raw[1:5]
            return cls(state_from_row(row), first_offset, partition, emitted_wall, _record_key(raw))
        if not isinstance(raw, dict) or "s" not in raw:
            raise CorruptTriggerStateError("track-state value has no trigger state ('s')")
        return cls(from_dict(raw["s"]), raw.get("o"), raw.get("p"), raw.get("w"))


_new_object = object.__new__
_SET_TRACKED = tuple(TrackedKey.__dict__[f.name].__set__ for f in fields(TrackedKey))


def tracked_key(
    state: SessionTriggerState,
    first_offset: int | None,
    partition: int | None,
    emitted_wall: float | None,
    record_key: bytes | None,
) -> TrackedKey:
    """``TrackedKey(state, first_offset, partition, emitted_wall, record_key)``, built for the track
    agent's hot path (one per written key per event): the frozen dataclass's ``__init__`` sets each
    field through ``object.__setattr__``; this sets its slots directly, in about half the time."""
    out: TrackedKey = _new_object(TrackedKey)
    set_state, set_first, set_partition, set_wall, set_key = _SET_TRACKED
    set_state(out, state)
    set_first(out, first_offset)
    set_partition(out, partition)
    set_wall(out, emitted_wall)
    set_key(out, record_key)
    return out
