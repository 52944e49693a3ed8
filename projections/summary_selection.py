"""Which stored summary stands for a filter key on the read side (pure).

Two orders, for two purposes:

- :func:`select_for_prompt` (``SessionReader.get_summary_view``, and
  ``session_search``'s ``current_hidden`` through :func:`select_hidden`):
  the key's own summary, else its nearest ancestor's (whole ``/`` segments,
  ``"app/a/x"`` → ``"app/a"`` → ``"app"``), else the full session's. Nothing
  else: a prompt cuts its history at the boundary of the summary it injects,
  and only these summaries hold the events that the cut hides. An unrelated
  branch's summary (``"app/a"`` for an agent on ``"app/b"``) never saw
  ``app/b``'s events, and a descendants' aggregate never saw the key's own
  events, so either would hide history that no summary holds. With none of
  them the prompt keeps its whole history (and nothing is "hidden").
- :func:`select_for_display` (``SessionReader.get_summary_text``): the
  guide's fallback order for showing a summary — exact → prefix aggregate of
  the key's subtree → full session → the freshest summary of any key. For
  display only: never a prompt's cut.

A **prefix aggregate** (display only): the summaries whose key equals the
prefix or descends from it, sorted by key, texts joined by a blank line,
boundary the earliest cutoff with no event id.

Blank texts never count as a summary.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from projections.filter_keys import FULL_SESSION, ancestors_of, is_within
from schemas import SummaryBoundary

Source = Literal["exact", "ancestor", "full_session", "prefix", "any"]


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


def select_for_prompt(cuts: Iterable[SummaryCut], filter_key: str) -> SelectedSummary | None:
    """Exact → nearest ancestor → full session (see the module docstring); ``None``: inject none, cut nothing."""
    usable = _usable(cuts)
    if filter_key in usable:
        return _single(filter_key, usable[filter_key], "exact")
    for ancestor in ancestors_of(filter_key):
        if ancestor in usable:
            return _single(filter_key, usable[ancestor], "ancestor")
    if filter_key != FULL_SESSION and FULL_SESSION in usable:
        return _single(filter_key, usable[FULL_SESSION], "full_session")
    return None


def select_hidden(cuts: Iterable[SummaryCut], filter_key: str) -> SelectedSummary | None:
    """What ``current_hidden`` searches behind: exactly the summary the prompt cuts at (:func:`select_for_prompt`)."""
    return select_for_prompt(cuts, filter_key)


def select_for_display(cuts: Iterable[SummaryCut], filter_key: str) -> SelectedSummary | None:
    """The guide's order: exact → prefix aggregate → full session → the freshest of any key. Display only."""
    usable = _usable(cuts)
    if filter_key in usable:
        return _single(filter_key, usable[filter_key], "exact")
    if filter_key != FULL_SESSION:
        found = prefix_aggregate(usable.values(), filter_key)
        if found is not None:
            return found
        if FULL_SESSION in usable:
            return _single(filter_key, usable[FULL_SESSION], "full_session")
    if not usable:
        return None
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
