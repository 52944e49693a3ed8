"""Wording shared by the request's ``[distill: …]`` notes: how they name events.

A note names at most ``NOTE_IDS_SHOWN`` event ids, whatever the number of events
it concerns: a long session must not turn a note into a list of thousands of
ids (it takes the room the history needed). Pure: no I/O.
"""

from __future__ import annotations

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


def event_sample(event_ids: Sequence[str]) -> str:
    """``event_id=a, b`` for a few ids; else the first ones and how many more (scattered events, no range)."""
    ids = list(event_ids)
    if len(ids) <= NOTE_IDS_SHOWN:
        return f"event_id={', '.join(ids)}"
    return f"event_id={', '.join(ids[:NOTE_IDS_SHOWN])} and {len(ids) - NOTE_IDS_SHOWN} more ({len(ids)} events)"
