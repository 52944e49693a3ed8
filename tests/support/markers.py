"""Marker oracle: one unique token per event, looked for again in summaries and summary requests.

A test puts :meth:`MarkerBook.mint` tokens into event texts (anywhere: glued to
CJK text, at the head and deep in the middle of a large tool result, inside tool
arguments). A scripted model (``tests.support.openai_server.MarkerEcho``) answers
with every marker it finds in the request, so a summary carries forward exactly
what reached the model. The invariant the oracle checks, per (session, filter key):
every marker of every summarizable event up to the boundary is in the final
summary — or its event's payload was cut for the request and the cut names the
event (``session_load(event_id="…")``), which keeps it recallable.

Markers are ``MK`` + 10 lowercase hex digits: no space, no punctuation (a length
cap that cuts at sentence ends cannot split one), derived from the event id so
two runs of the same seeded scenario use the same markers.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

MARKER_RE = re.compile(r"MK[0-9a-f]{10}")
CUT_RE = re.compile(r'session_load\(event_id="([^"]+)"\)')
"""How a cut payload names its event (``[… N chars left out; session_load(event_id="e17") …]``)."""


def find_markers(text: str) -> list[str]:
    """The markers in ``text``, in order of first appearance, each once."""
    return list(dict.fromkeys(MARKER_RE.findall(text)))


def find_cut_event_ids(text: str) -> set[str]:
    """Event ids named by payload cuts in ``text``."""
    return set(CUT_RE.findall(text))


@dataclass
class MarkerBook:
    """Which markers each event carries (and the way back from a marker to its event)."""

    by_event: dict[str, list[str]] = field(default_factory=dict)
    by_marker: dict[str, str] = field(default_factory=dict)

    def mint(self, event_id: str) -> str:
        """A new marker for ``event_id`` (an event may carry several: head and middle of a payload)."""
        markers = self.by_event.setdefault(event_id, [])
        digest = hashlib.blake2b(f"{event_id}#{len(markers)}".encode(), digest_size=5).hexdigest()
        marker = f"MK{digest}"
        if marker in self.by_marker:
            raise ValueError(f"marker collision for {event_id}: {marker}")
        markers.append(marker)
        self.by_marker[marker] = event_id
        return marker

    def markers_of(self, event_id: str) -> list[str]:
        return list(self.by_event.get(event_id, ()))


@dataclass(frozen=True)
class KeyVerdict:
    """What the oracle found for one (session, filter key)."""

    key: tuple[str, str]
    version: int | None
    boundary: str | None
    last_expected: str | None
    missing: Mapping[str, Sequence[str]]
    """event id -> its markers neither in the final summary nor accounted for by a cut."""
    cut_accounted: int = 0

    @property
    def behind(self) -> bool:
        return self.boundary != self.last_expected

    @property
    def ok(self) -> bool:
        return not self.missing and not self.behind

    def describe(self) -> str:
        parts = [f"{self.key}: v{self.version} boundary={self.boundary}"]
        if self.behind:
            parts.append(f"behind (last event {self.last_expected})")
        if self.missing:
            lost = ", ".join(f"{e}[{' '.join(m)}]" for e, m in list(self.missing.items())[:12])
            more = f" (+{len(self.missing) - 12} more events)" if len(self.missing) > 12 else ""
            parts.append(f"{sum(map(len, self.missing.values()))} markers of {len(self.missing)} events "
                         f"missing: {lost}{more}")  # fmt: skip
        return "; ".join(parts)


def judge_key(
    book: MarkerBook,
    key: tuple[str, str],
    key_events: Sequence[str],
    summary: str | None,
    boundary: str | None,
    version: int | None,
    cut_event_ids: Collection[str] = frozenset(),
    progress: str | None = None,
) -> KeyVerdict:
    """The verdict for one key.

    ``key_events`` are the summarizable events of the key's summary input, in log
    order; ``boundary`` the final summary's last event id (``None``: never
    summarized, then every event counts as missing). Events after the boundary
    are not judged here (they must be visible in the assembled request instead).
    ``progress``: the last event the boundary reaches once the key caught up (default the
    last of ``key_events``; a branch's triggers follow its subtree, not its ancestors' turns).
    """
    upto: Iterable[str] = key_events
    if boundary is not None and boundary in key_events:
        upto = key_events[: key_events.index(boundary) + 1]
    present = set(find_markers(summary or ""))
    missing: dict[str, list[str]] = {}
    cut = 0
    for event_id in upto:
        lost = [m for m in book.markers_of(event_id) if m not in present]
        if lost and event_id in cut_event_ids:
            cut += len(lost)
        elif lost:
            missing[event_id] = lost
    last = progress if progress is not None else (key_events[-1] if key_events else None)
    return KeyVerdict(key, version, boundary, last, missing, cut)
