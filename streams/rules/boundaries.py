"""Summary boundaries and the delta after them (the Go ``filterDeltaEvents`` rule).

* An event-id boundary is exact: the delta is what follows that event.
* If the id is absent or unknown, the timestamp decides, and events *at* the
  cutoff are kept (a timestamp alone cannot tell same-instant events apart).
* A cutoff in the future gives an empty delta; an unparsable cutoff gives
  every event (the boundary is treated as missing).
* Events read from the log *after the boundary event's own offset* are all after
  it, whatever their timestamps (a producer's clock behind, a sub-agent flushing
  late): :func:`delta_in_log_order` drops only what was summarized already (the
  boundary event, or an earlier event, published again). The timestamp rule
  would drop a late event for good: every later pass reads from the boundary on.
  The request goes by the log too (``streams.context.history.covered_mask`` over
  events in log order; the read side finds late events in ``late_events``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from schemas import SessionEvent, SummaryBoundary

T = TypeVar("T")

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
BOUNDARY_FORMAT_VERSION = 1
"""``SummaryBoundary.version``: the boundary's *format* version (the Go ``SummaryBoundary.Version``,
currently 1), not the summary's version — that one is ``SessionSummary.version``."""
_MICROSECOND = timedelta(microseconds=1)


def to_micros(value: datetime) -> int:
    """Exact microseconds since the epoch (naive values are taken as UTC)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return (value - EPOCH) // _MICROSECOND


def from_micros(value: int) -> datetime:
    """The inverse of :func:`to_micros`, in UTC."""
    return EPOCH + timedelta(microseconds=value)


def parse_cutoff(value: datetime | str | None) -> datetime | None:
    """A cutoff from a record or a legacy state string; ``None`` if missing or invalid."""
    if value is None or isinstance(value, datetime):
        return value
    if not value.strip():
        return None
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def delta_after(
    items: Sequence[T],
    last_event_id: str | None,
    cutoff: datetime | str | None,
    *,
    id_of: Callable[[T], str],
    micros_of: Callable[[T], int],
) -> list[T]:
    """The items (in arrival order) after a boundary ``(last_event_id, cutoff)``.

    See the module docstring for the rules.
    """
    if last_event_id:
        for i in range(len(items) - 1, -1, -1):
            if id_of(items[i]) == last_event_id:
                return list(items[i + 1 :])
    parsed = parse_cutoff(cutoff)
    if parsed is None:
        return list(items)
    limit = to_micros(parsed)
    return [item for item in items if micros_of(item) >= limit]


def covers(boundary: SummaryBoundary, event_id: str, ts: datetime, seq: int | None, boundary_seq: int | None) -> bool:
    """Whether ``boundary`` covers one event known by id, stamp and log position (``seq``, its offset;
    ``boundary_seq``: the boundary event's): it is the boundary event, or logged up to it — log order, as
    the delta and the read side go, whatever the stamps (a producer's clock ahead may have stamped the
    boundary after it) —; without both positions, stamped strictly before the cutoff."""
    if boundary.last_event_id == event_id:
        return True
    if boundary_seq is not None and seq is not None:
        return seq <= boundary_seq
    return ts < boundary.cutoff_at


def events_after(events: Sequence[SessionEvent], boundary: SummaryBoundary | None) -> list[SessionEvent]:
    """The delta of stored events (in log order) after ``boundary`` (``None`` → all)."""
    if boundary is None:
        return list(events)
    return delta_after(
        events,
        boundary.last_event_id,
        boundary.cutoff_at,
        id_of=lambda e: e.event_id,
        micros_of=lambda e: to_micros(e.timestamp),
    )


def early_ids(events: Sequence[SessionEvent], boundary: SummaryBoundary) -> set[str]:
    """Ids of ``events`` stamped before ``boundary``'s cutoff, the boundary event's own aside.

    Read after the boundary's offset, such an event is either late (never summarized) or an
    earlier event published again: only the log before the boundary tells which. Events at the
    cutoff instant are kept without asking, as the timestamp rule keeps them (a batch stamped
    with one instant would otherwise make every pass read the session's whole log).
    """
    cutoff = parse_cutoff(boundary.cutoff_at)
    if cutoff is None:
        return set()
    limit = to_micros(cutoff)
    # A UTC stamp (every validated event's) is compared as a datetime with the cutoff in UTC: the
    # same order as their microseconds, without converting each (this runs per event of every job).
    try:
        utc_limit = from_micros(limit)
        fast: object = UTC
    except OverflowError:  # a cutoff past year 9999 in UTC (an offset's): every stamp converted
        utc_limit, fast = cutoff, object()  # no stamp's tzinfo: a naive one too is converted
    last_id = boundary.last_event_id
    early: set[str] = set()
    for e in events:
        ts = e.timestamp
        if (ts < utc_limit if ts.tzinfo is fast else to_micros(ts) < limit) and e.event_id != last_id:
            early.add(e.event_id)
    return early


def delta_in_log_order(
    events: Sequence[SessionEvent], boundary: SummaryBoundary, summarized: Collection[str]
) -> list[SessionEvent]:
    """The delta among ``events`` read after the boundary event's offset (see the module docstring).

    ``summarized``: ids among :func:`early_ids` that the log holds at or before the boundary.
    """
    cutoff = parse_cutoff(boundary.cutoff_at)
    limit = to_micros(cutoff) if cutoff is not None else None
    return [
        e
        for e in events
        if e.event_id != boundary.last_event_id
        and (limit is None or e.event_id not in summarized or to_micros(e.timestamp) >= limit)
    ]
