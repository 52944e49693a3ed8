"""The read side: summaries, the delta after a boundary, session_load and session_search.

One class, :class:`SessionReader`, over three modules, one concern each:
:mod:`projections.summary_reads` (stored summaries, for display and for prompts),
:mod:`projections.event_windows` (the events after a boundary, ``session_load``) and
:mod:`projections.recall_search` (``session_search``). Every query names
``(app_name, user_id)`` in its partition key, so no read can return another tenant's
rows. All methods are async and never block the event loop.
"""

from __future__ import annotations

from projections.boundary import to_millis
from projections.event_windows import EventWindows, LoadedMessage, LoadedToolCall, LoadResult, StoredEvent
from projections.recall_search import SCOPES, RecallSearch, SearchHit
from projections.summary_reads import StoredSummary


class SessionReader(EventWindows, RecallSearch):
    """Async read API over the projections of one keyspace.

    ``embedder`` (optional) enables semantic search (Cassandra 5 ``ANN OF``);
    lexical search is always available. Construct once (statements are
    prepared here, a blocking step) and share.
    """


__all__ = [
    "SCOPES", "LoadResult", "LoadedMessage", "LoadedToolCall", "SearchHit", "SessionReader", "StoredEvent",
    "StoredSummary", "to_millis",
]  # fmt: skip
