"""Commands: records on the events topic that ask distill to do something.

They share the session key with the events, so they are ordered with them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from schemas.base import RequestContext, SessionRecord, WireBool

NOTHING_TO_SUMMARIZE = "NothingToSummarize"
"""``error_class`` of the ``SummaryFailure`` answering a ``summarize_sync`` that emitted no job."""

KEY_COOLING_DOWN = "KeyCoolingDown"
"""``error_class`` answering a ``summarize_sync`` (not forced) for a key whose last job was given up and
that still cools down, with no summary to wait for: a summary was due and failed (a real failure)."""

NOTHING_TO_SUMMARIZE_CLASSES = frozenset({NOTHING_TO_SUMMARIZE, "SummarySkipped"})
"""The answers to a ``summarize_sync`` that only say there was nothing to summarize.

``NothingToSummarize``: the track agent emitted no job and there is nothing
to wait for (thresholds not met or an empty delta on a key with no decided
job and no summary yet, a key the allowlist refuses); ``SummarySkipped``: the
worker found nothing to add. Any other ``error_class`` is a real failure (the
model call failed, or the job a request waited for did).
"""


class Summarize(SessionRecord):
    """Ask for a summary of ``filter_key`` (the guide's ``EnqueueSummaryJob``).

    As the guide's async worker does, a branch key cascades: the key if the
    allowlist allows it, then the full session if the cascade is on.
    ``force`` bypasses the trigger checks (but never an empty delta).
    """

    type: Literal["summarize"] = "summarize"
    command_id: str = Field(min_length=1)
    filter_key: str = ""
    force: WireBool = False
    context: RequestContext = Field(default_factory=dict)
    """Per-request markers for custom checks and the summarizer (see ``schemas.base.RequestContext``)."""


class SummarizeSync(SessionRecord):
    """Ask for a summary of exactly ``filter_key``, answered on the summaries topic with ``reply_to``.

    The guide's ``CreateSessionSummary``: unlike ``summarize`` there is no
    cascade to the full session, and a key the allowlist refuses summarizes
    nothing. The answer is the ``SessionSummary`` of the job it fired; when it
    fires none (its events are covered, a job is in flight, thresholds not
    met), a ``SummaryReply`` naming the key's latest summary once the jobs
    decided before it are answered, or the ``SummaryFailure`` of the job it
    waited for; ``NothingToSummarize`` when there is nothing to wait for.

    ``force`` bypasses the trigger checks (never an empty delta). The Python
    client always sends it (``False`` by default, as the guide's same-run
    path does). A record without it is read as ``force=True``: that is what
    such a record meant when it was written, and commands on the events log
    must keep their meaning when they are read again.

    ``model_request`` optionally carries the caller's own chat-completions
    request (``messages`` and ``tools``) for cache-safe forking.
    """

    type: Literal["summarize_sync"] = "summarize_sync"
    command_id: str = Field(min_length=1)
    reply_to: str = Field(min_length=1)
    filter_key: str = ""
    force: WireBool = True
    """Absent means ``True`` (the contract since the field exists); send it explicitly."""
    model_request: dict[str, Any] | None = None
    context: RequestContext = Field(default_factory=dict)
    """Per-request markers for custom checks and the summarizer (see ``schemas.base.RequestContext``)."""


class DeleteSession(SessionRecord):
    """Tombstone: state, summaries and stored events of the session are removed."""

    type: Literal["delete_session"] = "delete_session"
    command_id: str = Field(min_length=1)
