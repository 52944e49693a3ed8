"""The marker oracle for assembled requests: every event after the boundary is accounted for.

Each event carries unique markers in its payload. An event is accounted for when all its
markers are in the request, or when a ``[distill: …]`` note in the request names its event
id (a payload replaced or cut, recallable with ``session_load``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from schemas import SessionEvent


def marker(n: int) -> str:
    """A marker no other event's marker contains (CJK, so cuts and counts see wide text)."""
    return f"标记{n:04d}号"


def _text(messages: Iterable[dict[str, Any]]) -> str:
    return "\n".join(str(m) for m in messages)


def _named(text: str, event_id: str) -> bool:
    """A recall note names the event: ``event_id=e3``, ``event_id: e3`` or a list ``event_id=e1, e3``."""
    pattern = rf"event_id[=:] ?(?:[\w-]+, )*{re.escape(event_id)}(?![\w-])"
    return "[distill:" in text and re.search(pattern, text) is not None


_SPAN = re.compile(r"event_id=([\w-]+)(?:, [\w-]+)* … ([\w-]+) \(\d+ events\)")
_OLDER = re.compile(r"event_id=[\w-]+(?:, [\w-]+)* and \d+ older ones logged from ([\w-]+) to ([\w-]+) \(\d+ events\)")


def _spanned(text: str, order: list[str]) -> set[str]:
    """Ids inside a note's range ``event_id=a, b … z (N events)``: from ``a`` to ``z`` in log order; and the
    older ones of a list past its bound (``… and N older ones logged from a to z``)."""
    position = {event_id: i for i, event_id in enumerate(order)}
    out: set[str] = set()
    for first, last in [*_SPAN.findall(text), *_OLDER.findall(text)]:
        if "[distill:" in text and first in position and last in position:
            out.update(order[position[first] : position[last] + 1])
    return out


def unaccounted(messages: Iterable[dict[str, Any]], events: Iterable[SessionEvent]) -> list[str]:
    """Ids of ``events`` with a marker not in ``messages`` and which no recall note names (or spans)."""
    text = _text(messages)
    events = list(events)
    spanned = _spanned(text, [event.event_id for event in events])
    missing = []
    for event in events:
        if event.event_id in spanned:
            continue
        found = re.findall(r"标记\d{4}号", str(event.message.model_dump()))
        if not found:
            continue
        if all(m in text for m in found) or _named(text, event.event_id):
            continue
        missing.append(event.event_id)
    return missing
