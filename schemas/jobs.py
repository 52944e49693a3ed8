"""Summary jobs: emitted by the track agent, consumed by the summarize agent."""

from __future__ import annotations

import base64
from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from schemas.base import SCHEMA_VERSION, ContractModel, SessionKey
from schemas.summaries import SummaryBoundary, TriggerReport


class JobBoundary(ContractModel):
    """The furthest point a job may advance the boundary to."""

    last_event_id: str
    cutoff_at: datetime
    offset: int | None = None


class SummaryJob(ContractModel):
    """A request to summarize one ``(session, filter key)``.

    ``job_id`` is deterministic (session, key, ``from_version``, target
    boundary), so a re-emitted job is recognisably the same job and can never
    produce a second summary for the same boundary.
    """

    schema_version: int = SCHEMA_VERSION
    job_id: str
    app_name: str = Field(min_length=1)
    user_id: str = Field(min_length=1)
    session_id: str = Field(min_length=1)
    filter_key: str = ""
    cascade_full_session: bool = False
    from_version: int = 0
    previous_boundary: SummaryBoundary | None = None
    upto: JobBoundary
    trigger: TriggerReport
    force: bool = False
    origin: Literal["trigger", "command", "idle_sweep", "retry", "replay", "join"] = "trigger"
    """``join``: a ``summarize_sync`` that decided no job of its own waits here for the key's
    jobs decided before it (run after them, in order) and is answered with the summary then
    latest (``SummaryReply``), or with the failure of the job it waited for; it summarizes
    nothing and moves no boundary. ``upto`` is the decided boundary it waits for."""
    reply_to: str | None = None
    model_request: dict[str, Any] | None = None
    context_window: int | None = None
    model_hint: str | None = None
    summary_context_window: int | None = Field(default=None, gt=0)
    """The summary model's window as a provider's context-length refusal taught it for this
    key (``None``: the configured one): the summarizer budgets this job's requests with it."""
    attempt: int = 0
    created_at: datetime
    context: dict[str, str] = Field(default_factory=dict)
    """The triggering event's or command's ``context`` (validated there)."""
    events_from_offset: int | None = None
    """Events-topic offset (same partition as the job) from which the delta may be read
    when no previous summary gives a better start: the session's first event."""
    events_key_b64: str | None = None
    """Base64 of the Kafka key the session's events-topic records carry (any non-null bytes);
    ``None``: the canonical ``SessionKey.kafka_key()``. The delta is read by this key."""

    @property
    def session_key(self) -> SessionKey:
        return SessionKey(self.app_name, self.user_id, self.session_id)

    def events_key(self) -> bytes:
        """The record key of the session's events (see ``events_key_b64``)."""
        if self.events_key_b64 is None:
            return self.session_key.kafka_key()
        return base64.b64decode(self.events_key_b64, validate=True)
