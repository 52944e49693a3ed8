"""Which events a summary boundary covers, and which events a filter key sees.

Local copies of the delta and filter-key rules (the shared versions belong to
``streams.rules``); kept tiny so they can be swapped for the shared ones.
"""

from __future__ import annotations

from collections.abc import Sequence

from schemas import SessionEvent, SummaryBoundary


def covered_mask(events: Sequence[SessionEvent], boundary: SummaryBoundary | None) -> list[bool]:
    """For each event, whether the boundary covers it.

    An event-id boundary is exact: the event with that id and everything
    before it in ``events`` order are covered. When the id is absent (or not
    among ``events``) the timestamp rule applies: events strictly older than
    ``cutoff_at`` are covered, so events sharing the cutoff timestamp stay.
    """
    if boundary is None:
        return [False] * len(events)
    if boundary.last_event_id:
        for index, event in enumerate(events):
            if event.event_id == boundary.last_event_id:
                return [i <= index for i in range(len(events))]
    cutoff = boundary.cutoff_at
    return [event.timestamp < cutoff for event in events]


def matches_filter_key(event_key: str, key: str) -> bool:
    """Whether an event with ``event_key`` is visible to an agent reading ``key``.

    Empty keys match everything; otherwise ancestors and descendants match,
    segment-wise (``app/a`` sees ``app`` and ``app/a/b`` but not ``app/ab``).
    """
    if not key or not event_key:
        return True
    k, e = key + "/", event_key + "/"
    return k.startswith(e) or e.startswith(k)
