"""Which stored summary stands for a filter key on the read side (pure).

A branch key (``"planner/flights"``) may have no summary of its own while its
descendants do (``"planner/flights/outbound"``, ``"planner/flights/return"``).
The key is then represented by the **prefix aggregate** of its subtree: the
summaries whose key equals it or descends from it (whole ``/`` segments),
sorted by key, their texts joined by a blank line. The aggregate hides only
what *all* of them hide, so its boundary is the **earliest** cutoff with no
event id (an event id names one branch's last event, not the aggregate's).

Lookup orders built on it:

- :func:`select_for_prompt` (``SessionReader.get_summary_view`` /
  ``get_summary_text``): exact → prefix aggregate → full session → the
  freshest summary of any key (the guide's "any available summary").
- :func:`select_hidden` (``session_search`` scope ``current_hidden``):
  exact → prefix aggregate → full session; no summary → nothing is hidden.

Blank texts never count as a summary.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from projections.filter_keys import FULL_SESSION, is_within
from schemas import SummaryBoundary

Source = Literal["exact", "prefix", "full_session", "any"]


@dataclass(frozen=True)
class SummaryCut:
    """One stored latest summary: its key, text and boundary."""

    filter_key: str
    text: str
    cutoff_at: datetime
    last_event_id: str | None
    created_at: datetime | None = None


@dataclass(frozen=True)
class SelectedSummary:
    """The summary standing for a key: its text, boundary, the keys it came from and why."""

    filter_key: str
    """The key that was asked for."""
    summary: str
    cutoff_at: datetime
    last_event_id: str | None
    keys: tuple[str, ...]
    source: Source

    @property
    def boundary(self) -> SummaryBoundary:
        """The boundary as the records carry it (what ``streams.context.assemble`` cuts history at)."""
        return SummaryBoundary(cutoff_at=self.cutoff_at, last_event_id=self.last_event_id)


def _single(asked: str, cut: SummaryCut, source: Source) -> SelectedSummary:
    return SelectedSummary(asked, cut.text, cut.cutoff_at, cut.last_event_id, (cut.filter_key,), source)


def _usable(cuts: Iterable[SummaryCut]) -> dict[str, SummaryCut]:
    return {c.filter_key: c for c in cuts if c.text.strip()}


def prefix_aggregate(cuts: Iterable[SummaryCut], prefix: str) -> SelectedSummary | None:
    """The subtree of ``prefix`` as one summary (see the module docstring); ``None`` when it has none."""
    members = sorted((c for c in _usable(cuts).values() if is_within(c.filter_key, prefix)), key=lambda c: c.filter_key)
    if not members:
        return None
    if len(members) == 1:
        return _single(prefix, members[0], "prefix")
    return SelectedSummary(
        filter_key=prefix,
        summary="\n\n".join(c.text for c in members),
        cutoff_at=min(c.cutoff_at for c in members),
        last_event_id=None,
        keys=tuple(c.filter_key for c in members),
        source="prefix",
    )


def select_hidden(cuts: Iterable[SummaryCut], filter_key: str) -> SelectedSummary | None:
    """Exact → prefix aggregate (branch keys) → full session; ``None``: no summary hides anything."""
    usable = _usable(cuts)
    if filter_key in usable:
        return _single(filter_key, usable[filter_key], "exact")
    if filter_key != FULL_SESSION:
        found = prefix_aggregate(usable.values(), filter_key)
        if found is not None:
            return found
        if FULL_SESSION in usable:
            return _single(filter_key, usable[FULL_SESSION], "full_session")
    return None


def select_for_prompt(cuts: Iterable[SummaryCut], filter_key: str) -> SelectedSummary | None:
    """:func:`select_hidden`, else the freshest summary of any key (latest cutoff, newest, key order)."""
    usable = _usable(cuts)
    found = select_hidden(usable.values(), filter_key)
    if found is not None or not usable:
        return found
    floor = datetime.min
    best = max(
        usable.values(),
        key=lambda c: (
            c.cutoff_at,
            c.created_at if c.created_at is not None else floor.replace(tzinfo=c.cutoff_at.tzinfo),
            [-ord(ch) for ch in c.filter_key],
        ),
    )
    return _single(filter_key, best, "any")
