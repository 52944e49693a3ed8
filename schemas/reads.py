"""What the read side hands an agent for its next request (``projections.context_read``).

A :class:`ContextRead` is everything ``streams.context.assemble`` needs for one
(session, filter key): the summary that applies to the key, and the stored
events it must see, in log order — so that assembling from it gives the
request the full history would give. ``projection_lag`` says how far the
projection is behind the events topic, so an agent can wait or warn;
``index_lag`` says the same of the recall index (``session_search`` may not
find the newest events yet), ``deep_index_lag`` of its deep stage (the later
chunks of long documents: a detail deep in a large tool result may not be
found yet).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from schemas.base import ContractModel
from schemas.events import SessionEvent
from schemas.summaries import SummaryBoundary

AppliedSource = Literal["exact", "ancestor"]


class AppliedSummary(ContractModel):
    """The summary standing for a key in a prompt: the key's own, else its nearest ancestor's (``""`` last).

    Never a sibling's or a descendant's: those do not cover the key's events.
    """

    filter_key: str
    """The key whose summary this is (the asked key or one of its ancestors)."""
    version: int
    summary: str
    boundary: SummaryBoundary
    source: AppliedSource
    epoch: int = 0
    """The epoch the session is served from (``schemas.epochs``): every key's summary is of it."""


class ProjectionLag(ContractModel):
    """How far a stage (the projector, or the recall indexer) is behind on the session's Kafka partition.

    ``events_behind``: records of the partition the projector had seen in the
    log but not yet written, at its last heartbeat. ``heartbeat_age_s``: how
    old that heartbeat is (the projector writes one at least every second
    while it runs). ``seconds_behind``: 0 when caught up and the heartbeat is
    fresh; else the time since the projection was last known to be caught up
    (at least the heartbeat's age) — events newer than that may be missing.
    ``known``: ``False`` when no heartbeat exists for the partition (old
    projector, no indexer running, or the session was never projected), then
    the figures are 0.
    """

    topic: str = ""
    partition: int = -1
    events_behind: int = Field(default=0, ge=0)
    seconds_behind: float = Field(default=0.0, ge=0)
    heartbeat_age_s: float = Field(default=0.0, ge=0)
    known: bool = False


class ReadStats(ContractModel):
    """What the read did: rows and queries (every read is a bounded slice of the partition)."""

    queries: int = 0
    event_rows: int = 0
    truncated: bool = False
    """``True`` when the ``max_events`` cap stopped a read of events the request shows: the oldest events after
    the boundary (or of the history, read whole) are missing."""
    current_unread: bool = False
    """``True`` when the scan back from the boundary for the current user message stopped at ``max_events``
    without finding one (none is current). Only a request answering the read's current message misses it: one
    answering a new message, or one named by id, lacks nothing (the events before the boundary are the
    summary's)."""


class ContextRead(ContractModel):
    """The result of the one read call: pass it to ``streams.context.assemble_from_read``.

    ``events`` are in log order (the Kafka offset: every record of a session
    shares one partition), the order the summarizer reads them in: every event
    after the summary's boundary visible to ``filter_key`` (ancestor keys
    included) — logged after the boundary event, whatever its timestamp, when
    that event is stored; else stamped at or after the cutoff —, the current
    user message and the covered events of its invocation (the resume tail),
    the covered calls of late tool results and the covered user messages of
    the turns those events belong to. Partial events are left out, except the
    boundary event itself, which is there whenever it is stored, even when
    ``filter_key`` does not see it (another branch's event under an ancestor's
    summary, or a streaming chunk): it marks where the summary ends, and the
    assembly shows nothing of it.
    """

    app_name: str
    user_id: str
    session_id: str
    filter_key: str
    summary: AppliedSummary | None = None
    served_epoch: int = 0
    """The epoch the session is served from (``schemas.epochs``): ``summary``, if any, is of it. Versions
    count per epoch: a summary of another epoch is neither newer nor older than ``summary``."""
    events: tuple[SessionEvent, ...] = ()
    full_history: bool = False
    """``events`` hold every visible event of the key, before the summary's boundary too (up to
    ``stats.truncated``): read so for a request that will not show the summary. ``False`` with a summary:
    the events before its boundary are missing, except the covered ones listed above."""
    boundary_seq: int | None = None
    """The log position (events-topic offset) of the summary's boundary event when the projection holds
    it: an event logged after it is the request's, one logged up to it the summary's, whatever their
    timestamps. ``None``: no summary, or its boundary event is not stored (the cut goes by time)."""
    event_seqs: dict[str, int] = Field(default_factory=dict)
    """Each of ``events``' log position (events-topic offset; one partition per session), by event id: where
    an event the read does not hold yet goes among them (the projector writes a batch's rows concurrently,
    so the rows stored need not be a prefix of the log)."""
    current_event_id: str | None = None
    """The current user message (the latest visible user turn, or the one asked for)."""
    projection_lag: ProjectionLag = Field(default_factory=ProjectionLag)
    """The projector's lag: events newer than it may be missing from ``events``."""
    index_lag: ProjectionLag = Field(default_factory=ProjectionLag)
    """The recall indexer's lag: ``session_search`` may not find events newer than it yet."""
    deep_index_lag: ProjectionLag = Field(default_factory=ProjectionLag)
    """The lag of the recall indexer's deep stage (the chunks of long documents after their first, see
    ``projections.indexer``): ``session_search`` finds an event newer than it by its first 8 Ki characters
    only. Unknown (``known=False``) where no deep stage runs (a single indexing stage writes everything)."""
    stats: ReadStats = Field(default_factory=ReadStats)
