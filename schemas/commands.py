"""Commands: records on the events topic that ask distill to do something.

They share the session key with the events, so they are ordered with them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from schemas.base import SessionRecord


class Summarize(SessionRecord):
    """Ask for a summary of ``filter_key`` (the guide's ``EnqueueSummaryJob``).

    ``force`` bypasses the trigger checks (but never an empty delta).
    """

    type: Literal["summarize"] = "summarize"
    command_id: str = Field(min_length=1)
    filter_key: str = ""
    force: bool = False


class SummarizeSync(SessionRecord):
    """Like ``summarize``, answered on the summaries topic with ``reply_to``.

    ``model_request`` optionally carries the caller's own chat-completions
    request (``messages`` and ``tools``) for cache-safe forking.
    """

    type: Literal["summarize_sync"] = "summarize_sync"
    command_id: str = Field(min_length=1)
    reply_to: str = Field(min_length=1)
    filter_key: str = ""
    force: bool = True
    model_request: dict[str, Any] | None = None


class DeleteSession(SessionRecord):
    """Tombstone: state, summaries and stored events of the session are removed."""

    type: Literal["delete_session"] = "delete_session"
    command_id: str = Field(min_length=1)
