"""An event's JSON, serialized once per event object (what a cache key hashes of each event).

A job's cache key hashes every selected event's JSON. The same event object comes back in
later jobs — held back by ``skip_recent_events`` or ``keep_recent_rounds``, in the jobs of
other filter keys, in a retry — since the worker hands jobs the events its track agent
decoded (:class:`~streams.app.event_log.RecentEvents`). Events are frozen models whose
content nothing changes, so the bytes serialized the first time stand for the object as long
as it lives; the entry goes with the object (a weak reference), never outliving it.
"""

from __future__ import annotations

import weakref

from schemas import SessionEvent

_memo: dict[int, tuple[weakref.ref[SessionEvent], bytes]] = {}
"""By ``id(event)``: a weak reference to the event, and its JSON. The reference's callback removes the
entry when the event is collected, before its id can name another object."""


def _gone(ref: weakref.ref[SessionEvent], key: int) -> None:
    entry = _memo.get(key)
    if entry is not None and entry[0] is ref:
        del _memo[key]


def event_json(event: SessionEvent) -> bytes:
    """``event.model_dump_json().encode()`` (the same bytes, without the str round trip), serialized once."""
    key = id(event)
    entry = _memo.get(key)
    if entry is not None and entry[0]() is event:
        return entry[1]
    raw: bytes = event.__pydantic_serializer__.to_json(event)
    _memo[key] = (weakref.ref(event, lambda ref: _gone(ref, key)), raw)
    return raw


def held() -> int:
    """Events whose JSON is kept (tests: the memo holds nothing past its events)."""
    return len(_memo)
