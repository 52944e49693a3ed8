"""Summary records: what the summarize agent publishes on the summaries topic."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from typing import Literal

from pydantic import Field, field_validator

from schemas.base import SCHEMA_VERSION, ContractModel, SessionKey, utc_instant

TriggerName = Literal[
    "event_threshold",
    "token_threshold",
    "time_threshold",
    "context_threshold",
    "conversation_threshold",
    "important_content",
    "custom",
    "always",
    "force",
    "manual",
    "idle_sweep",
]
"""Which check fired. Names follow the Go guide; ``conversation_threshold`` and
``important_content`` are the Python guide's checks, ``always`` an empty check list."""

CallMode = Literal["standalone", "cache_safe_fork", "custom_response", "shorten"]
"""``shorten``: the one call asking the model to rewrite an answer over ``max_summary_length`` shorter."""


class SummaryBoundary(ContractModel):
    """The point up to which a summary covers its branch.

    ``last_event_id`` is exact; with only ``cutoff_at`` the delta keeps events
    at the same timestamp (the guide's rule).
    """

    cutoff_at: datetime
    last_event_id: str | None = None
    version: int = 1

    @field_validator("cutoff_at")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        return utc_instant(value, "cutoff_at")


class TriggerReport(ContractModel):
    """The check that fired: its value and threshold in ``unit``."""

    name: TriggerName
    value: float = 0
    threshold: float = 0
    unit: Literal["events", "tokens", "ms", "rounds", "matches", "chars", ""] = ""
    window: int | None = None
    ratio: float | None = None
    detail: str = ""


class CallReport(ContractModel):
    """One attempt at producing the summary text."""

    mode: CallMode
    model: str
    estimated_prompt_tokens: int = 0
    budget_tokens: int | None = None
    provider_prompt_tokens: int | None = None
    provider_cached_tokens: int | None = None
    completion_tokens: int | None = None
    latency_ms: float | None = None
    outcome: Literal["ok", "retried", "failed"] = "ok"
    error: str | None = None
    fork_declined: str | None = None
    """Why a standalone call was made although the caller sent its own request to fork
    (it lacks events of the pass or the previous summary, or does not fit)."""


PayloadPart = Literal["tool_result", "tool_arguments", "content"]


class PayloadCut(ContractModel):
    """One event payload sent head + tail only; the event itself is stored whole.

    ``session_load(event_id=...)`` returns the full payload; ``tool_call_id``
    names the call whose result or arguments were cut.
    """

    event_id: str
    part: PayloadPart
    tool_call_id: str | None = None
    chars: int = Field(ge=0)
    """Length of the whole payload."""
    kept_chars: int = Field(ge=0)
    """Characters of it the summary request carried (head + tail)."""


class LengthCut(ContractModel):
    """The summary text cut to ``max_summary_length`` after the model's answer, and its one
    shorter rewrite, were both still over it (or the rewrite failed).

    What was cut is in no record: the cut text rolls forward as the previous summary.
    """

    max_chars: int = Field(ge=1)
    answer_chars: int = Field(ge=0)
    """Length of the model's first answer."""
    rewrite_chars: int | None = Field(default=None, ge=0)
    """Length of the shorter rewrite (``None``: none usable — the ``shorten`` call failed, see its report,
    or the answer was too large to send back within the input budget)."""
    kept_chars: int = Field(ge=0)
    """Length of the stored summary (the cut of the shorter of the two)."""


def count_model_calls(calls: Iterable[CallReport]) -> int:
    """How many of ``calls`` reached the model (a ``custom_response`` is a callback's answer, no call)."""
    return sum(1 for c in calls if c.mode != "custom_response")


class SummaryReport(ContractModel):
    """Why and how a summary was produced.

    ``truncated_payloads`` lists the event payloads the summary input carried
    only head + tail (each request marks them with the event id);
    ``truncated_previous_summary`` says the previous summary itself was cut,
    which happens only when it alone does not fit beside the smallest form of
    the conversation. ``length_cut`` says the summary itself was cut to
    ``max_summary_length`` (after the model was asked once to shorten it).
    """

    trigger: TriggerReport
    calls: tuple[CallReport, ...] = ()
    passes: int = 1
    truncated_previous_summary: bool = False
    partial_prefix: bool = False
    truncated_payloads: tuple[PayloadCut, ...] = ()
    length_cut: LengthCut | None = None

    @property
    def model_calls(self) -> int:
        """The calls that reached the model (:func:`count_model_calls`)."""
        return count_model_calls(self.calls)


class SummaryStats(ContractModel):
    """Compression statistics (the Python guide's, and the same in tokens)."""

    original_event_count: int = 0
    compressed_event_count: int = 1
    compression_ratio: float = 0.0
    original_tokens: int = 0
    summary_tokens: int = 0
    token_compression_ratio: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0


class SessionSummary(ContractModel):
    """A summary of one ``(session, filter key)`` at one boundary.

    ``version`` is 1 for the first summary of a key and grows by one with each
    next summary of its ``epoch``; ``previous_boundary`` marks where the covered
    window starts (``None`` for the first summary), ``boundary`` where it ends.

    ``epoch`` is the line of summaries the record belongs to (``schemas.epochs``):
    0 the live line, and every record written before epochs existed; N the line
    the N-th ``distill replay`` built, which the live worker continues once a
    session adopted it. Versions order by ``(epoch, version)``.

    ``chain_from_offset`` is where the input of the summary's *chain* began in
    the events topic (the session's partition): the offset the first summary of
    the chain read its events from (the session's first record as the worker
    that built it knew it; a ``delete_session`` resets it), carried unchanged by
    every summary that rolls that one forward. A chain that starts after the
    session's first record holds none of the history before it (a replay that
    Kafka's retention had already dropped it from, or a ``--from-latest`` run):
    an epoch switch refuses to serve it (``schemas.epochs.EPOCH_MISSING_HISTORY``).
    ``None``: not known (a summary of an older build).
    """

    schema_version: int = SCHEMA_VERSION
    type: Literal["summary"] = "summary"
    app_name: str = Field(min_length=1)
    user_id: str = Field(min_length=1)
    session_id: str = Field(min_length=1)
    filter_key: str = ""
    summary: str
    version: int = Field(ge=1)
    previous_version: int | None = None
    epoch: int = Field(default=0, ge=0)
    boundary: SummaryBoundary
    previous_boundary: SummaryBoundary | None = None
    model: str
    prompt_version: str
    created_at: datetime
    stats: SummaryStats = SummaryStats()
    report: SummaryReport
    job_id: str
    reply_to: str | None = None
    caught_up: bool = True
    chain_from_offset: int | None = Field(default=None, ge=0)

    @field_validator("created_at")
    @classmethod
    def _created_utc(cls, value: datetime) -> datetime:
        return utc_instant(value, "created_at")

    @property
    def session_key(self) -> SessionKey:
        return SessionKey(self.app_name, self.user_id, self.session_id)


def stored_summary(raw: str | bytes) -> SessionSummary:
    """A summary read back from storage (a projection row's ``summary_json``), its unknown fields ignored.

    Only for reads that show a stored summary (an agent's context read, the read API): a
    row a newer projector wrote may carry a field this build does not know, and such a
    reader neither writes the record back nor acts on the field, so refusing the row would
    only take the session's summary away until the agent is upgraded. Stages that carry
    a summary forward or write it (workers, projectors) keep validating strictly: a field
    they dropped would be lost from every summary built on it. Top-level fields only.
    """
    data = json.loads(raw)
    if isinstance(data, dict):
        data = {k: v for k, v in data.items() if k in SessionSummary.model_fields}
    return SessionSummary.model_validate(data)


class SummaryFailure(ContractModel):
    """Published instead of a summary when a job cannot be answered.

    A job given up (``gave_up``: its retries or its ``job_timeout_s`` ran out, or
    a permanent error) starts its key's failure cooldown on the track side; a
    sync command that had nothing to summarize does not. ``report`` holds the
    model calls the job made, ``context_window`` the window a provider's
    context-length refusal named (the key's next jobs budget with it).
    """

    schema_version: int = SCHEMA_VERSION
    type: Literal["summary_failure"] = "summary_failure"
    app_name: str
    user_id: str
    session_id: str
    filter_key: str = ""
    job_id: str
    reply_to: str | None = None
    error_class: str
    reason: str
    created_at: datetime
    gave_up: bool = False
    retryable: bool | None = None
    """Whether the error that ended the job was transient (retries or time ran out)."""
    attempts: int | None = None
    report: SummaryReport | None = None
    context_window: int | None = Field(default=None, gt=0)
    upto_event_id: str | None = None
    """The target event of the job that failed (``None``: an answer that is no job's failure)."""
    events_from_offset: int | None = Field(default=None, ge=0)
    """The failed job's ``events_from_offset``: the session's first events-topic offset as the job
    knew it (a ``delete_session`` resets it). A failure of a job decided before the session's last
    deletion starts no cooldown of the session since. ``None``: not known (an older build, no job)."""


class SummaryReply(ContractModel):
    """The answer to a ``summarize_sync`` whose events a summary of another job covers.

    Published when the request made no job of its own: the key's jobs decided
    before it (the one in flight, usually) were answered first, and ``summary``
    is the key's latest summary then — as published, unchanged (its own
    ``reply_to`` is the request *it* answered, if any). Consumers of the
    summaries topic that want summaries skip replies: a reply is never a new
    version.
    """

    schema_version: int = SCHEMA_VERSION
    type: Literal["summary_reply"] = "summary_reply"
    app_name: str = Field(min_length=1)
    user_id: str = Field(min_length=1)
    session_id: str = Field(min_length=1)
    filter_key: str = ""
    job_id: str
    """The job that answered (a ``join`` job, or a sync job whose target was already covered)."""
    reply_to: str = Field(min_length=1)
    summary: SessionSummary
    created_at: datetime
