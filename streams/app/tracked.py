"""The table value of the track agent: trigger state of one ``(session, filter key)``.

Besides the rules' :class:`SessionTriggerState` (counts and the pending-event
index, never content) it remembers ``first_offset``: the events-topic offset
of the first event of the session (full-session entry only). A job carries it
so the summarize side can read a key's first delta straight from the log.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from streams.rules.errors import CorruptTriggerStateError
from streams.rules.trigger_state import SessionTriggerState, from_dict, to_dict

KEY_SEPARATOR = "\x1f"


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

    @property
    def key(self) -> str:
        s = self.state
        return table_key(s.app_name, s.user_id, s.session_id, s.filter_key)

    def to_bytes(self) -> bytes:
        return json.dumps(
            {"s": to_dict(self.state), "o": self.first_offset, "p": self.partition, "w": self.emitted_wall},
            separators=(",", ":"),
        ).encode()

    @classmethod
    def from_bytes(cls, data: bytes | str) -> TrackedKey:
        """Read a table value back; ``CorruptTriggerStateError`` says which part is unreadable.

        During changelog recovery this error is not swallowed: the worker stops
        with it rather than rebuilding a key from nothing, which could silently
        drop never-summarized events from that key's first summary. The way out
        is a replay (fresh changelog), which rebuilds every state from the log.
        """
        try:
            raw = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CorruptTriggerStateError(f"track-state value is not JSON: {exc}") from exc
        if not isinstance(raw, dict) or "s" not in raw:
            raise CorruptTriggerStateError("track-state value has no trigger state ('s')")
        return cls(from_dict(raw["s"]), raw.get("o"), raw.get("p"), raw.get("w"))
