"""Wording shared by the request's ``[distill: …]`` notes and cut markers: how they name events.

One marker format for every cut (:func:`cut_marker`), one way to say how the
model reads a payload back (:func:`recall_hint`), one JSON key for arguments
replaced by a note (:data:`CONTEXT_NOTE_KEY`). A note of a range (rounds
dropped oldest first) names ``NOTE_IDS_SHOWN`` ids and the count; a note of
scattered events names each, up to ``NOTE_IDS_LISTED``, then a range of the
older ones: a long session must not turn a note into a list of thousands of
ids (it takes the room the history needed). Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

NOTE_IDS_SHOWN = 4
"""The most event ids one note names (the first ones and the last one)."""


def event_span(event_ids: Sequence[str]) -> str:
    """``event_id=a, b`` for a few ids; else the first ids, ``…``, the last one and the count.

    ``event_id=a, b, c … z (3200 events)``: the events from ``a`` to ``z`` in the
    request's order (for rounds dropped oldest first, a range).
    """
    ids = list(event_ids)
    if len(ids) <= NOTE_IDS_SHOWN:
        return f"event_id={', '.join(ids)}"
    return f"event_id={', '.join(ids[: NOTE_IDS_SHOWN - 1])} … {ids[-1]} ({len(ids)} events)"


NOTE_IDS_LISTED = 50
"""The most ids a note of scattered events names one by one (:func:`event_list`); older ones go as a range."""


def event_list(event_ids: Sequence[str]) -> str:
    """Every id of scattered events (in log order, oldest first): ``event_id=a, b, c``.

    Scattered events have no range that holds them alone, so each is named, up to
    ``NOTE_IDS_LISTED``; beyond that the newest ``NOTE_IDS_LISTED`` are named and
    the older ones stated by how many there are and where the log holds them:
    ``event_id=f, g, … and 70 older ones logged from a to e (120 events)``. The
    note's size stays bounded whatever the session, and no event goes unmentioned
    (a count alone, ``and 6 more``, named neither these events nor where they are).
    """
    ids = list(event_ids)
    if len(ids) <= NOTE_IDS_LISTED:
        return f"event_id={', '.join(ids)}"
    older, newest = ids[:-NOTE_IDS_LISTED], ids[-NOTE_IDS_LISTED:]
    return (
        f"event_id={', '.join(newest)} and {len(older)} older ones logged from {older[0]} to {older[-1]} "
        f"({len(ids)} events)"
    )


CONTEXT_NOTE_KEY = "_distill_context_note"
"""The key of the note in tool-call arguments the request replaces (still a JSON object for the API)."""


def recall_hint(session_load: bool, event_id: str | None = None, *, many: bool = False) -> str:
    """How the model gets back what a note names.

    ``session_load(event_id="e3") returns it whole`` (``event_id=...`` and
    ``them`` for ``many`` events) when that tool is offered, else that it
    stays stored in the session.
    """
    if session_load:
        target = f'event_id="{event_id}"' if event_id else "event_id=..."
        return f"session_load({target}) returns {'them' if many else 'it whole'}"
    return "they stay stored in the session" if many else "it stays stored in the session"


def cut_marker(removed: int, what: str, *details: str) -> str:
    """``[distill: N characters cut from the middle of <what>; <details>…]``: every cut's marker."""
    return f"[distill: {removed} characters cut from the middle of {what}{''.join(f'; {d}' for d in details if d)}]"


def context_note_json(note: str, **parts: str) -> str:
    """Arguments replaced by a note: ``{"_distill_context_note": note, **parts}``, compact JSON."""
    return json.dumps({CONTEXT_NOTE_KEY: note, **parts}, ensure_ascii=False, separators=(",", ":"))
