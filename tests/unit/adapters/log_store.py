"""Kafka and Cassandra of one session in memory, for the adapters' backend (no service).

The log holds events and summaries in the order they were published; the projector
has written the first ``projected`` of them (in log order, as the real one does).
The reads answer from what is projected only, by the read side's rules: the summary
that applies to the key, and the events logged after its boundary event (the
boundary event itself included), or every event without a summary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from projections.context_read import applicable_summary, visible
from projections.summary_reads import StoredSummary
from schemas import SessionEvent, SessionKey, SessionSummary
from schemas.reads import ContextRead


@dataclass(frozen=True)
class _Row:
    stored: SessionEvent

    @property
    def event_id(self) -> str:
        return self.stored.event_id

    def event(self) -> SessionEvent:
        return self.stored


class LogStore:
    """The client, the context reader and the session reader a ``SessionBackend`` takes, over one log."""

    def __init__(self) -> None:
        self.log: list[SessionEvent | SessionSummary] = []
        self.projected = 0

    # -- Kafka -----------------------------------------------------------------------------------------------

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    def append(self, *records: SessionEvent | SessionSummary) -> list[int]:
        """Log ``records`` (another producer, or the worker); their offsets."""
        start = len(self.log)
        self.log.extend(records)
        return list(range(start, len(self.log)))

    async def publish_logged(self, records: Sequence[SessionEvent]) -> list[int]:
        return self.append(*records)

    async def publish_many(self, records: Sequence[SessionEvent]) -> int:
        return len(self.append(*records))

    def project(self) -> None:
        """The projector catches up."""
        self.projected = len(self.log)

    # -- Cassandra -------------------------------------------------------------------------------------------

    def _shown(self) -> list[tuple[int, SessionEvent | SessionSummary]]:
        return list(enumerate(self.log[: self.projected]))

    def _latest(self) -> dict[str, SessionSummary]:
        latest: dict[str, SessionSummary] = {}
        for _, record in self._shown():
            if isinstance(record, SessionSummary):
                known = latest.get(record.filter_key)
                if known is None or record.version > known.version:
                    latest[record.filter_key] = record
        return latest

    async def read(
        self, key: SessionKey, filter_key: str = "", *, current_event_id: str | None = None, full_history: bool = False
    ) -> ContextRead:
        events = [(seq, r) for seq, r in self._shown() if isinstance(r, SessionEvent)]
        applied = applicable_summary(self._latest().values(), filter_key)
        boundary_seq = None
        if applied is not None and not full_history:
            at = next((seq for seq, e in events if e.event_id == applied.boundary.last_event_id), None)
            assert at is not None, "the fake knows exact boundaries only"
            boundary_seq = at
            events = [(seq, e) for seq, e in events if seq >= at]
        shown = [e for seq, e in events if seq == boundary_seq or (visible(e.filter_key, filter_key) and not e.partial)]
        users = [e for e in shown if e.message.role == "user"]
        return ContextRead(
            app_name=key.app_name, user_id=key.user_id, session_id=key.session_id, filter_key=filter_key,
            summary=applied, events=tuple(shown), full_history=applied is None or full_history,
            boundary_seq=boundary_seq, current_event_id=users[-1].event_id if users else None,
        )  # fmt: skip

    async def latest_summary(self, key: SessionKey, filter_key: str = "") -> StoredSummary | None:
        s = self._latest().get(filter_key)
        if s is None:
            return None
        return StoredSummary(filter_key=s.filter_key, version=s.version, summary=s.summary,
                             cutoff_at=s.boundary.cutoff_at, last_event_id=s.boundary.last_event_id,
                             created_at=s.created_at, record=s)  # fmt: skip

    async def events_after_boundary(
        self, key: SessionKey, filter_key: str = "", *, summary: StoredSummary, use_latest: bool = True
    ) -> list[_Row]:
        """The stored events stamped at or after ``summary``'s cutoff (what ``boundary_event`` looks in)."""
        return [_Row(r) for _, r in self._shown() if isinstance(r, SessionEvent) and r.timestamp >= summary.cutoff_at]

    async def session_stats(self, key: SessionKey) -> dict[str, Any]:
        return {"events": sum(1 for _, r in self._shown() if isinstance(r, SessionEvent) and not r.partial)}
