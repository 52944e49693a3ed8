"""The Cassandra adapter of the recall tools: ``RecallReader`` over ``projections.read_api.SessionReader``.

The executor (``streams.context.recall_tools``) stays pure; this adapter
translates its queries into read-API calls. Scopes, broadening, scoring,
window normalization and the byte slicing of large tool results all happen
in the read API, once: the slice is cut from the row in Cassandra's answer
and only the slice reaches the executor.
"""

from __future__ import annotations

from collections.abc import Sequence

from projections.errors import AnchorNotFound
from projections.lexical import MIN_SCORE
from projections.read_api import SessionReader
from schemas import SessionKey
from streams.context.recall_tools import (
    SearchHit,
    SearchQuery,
    Window,
    WindowCall,
    WindowCallTurn,
    WindowEvent,
    WindowQuery,
    WindowSkip,
)


class CassandraRecallReader:
    """Implements ``streams.context.recall_tools.RecallReader`` with a shared ``SessionReader``.

    Lexical hits below the Go threshold (0.45) are always dropped, whatever
    ``min_score`` the model asks for; a higher ``min_score`` raises the bar.
    """

    def __init__(self, reader: SessionReader) -> None:
        self.reader = reader

    async def search(self, query: SearchQuery) -> Sequence[SearchHit]:
        key = SessionKey(query.app_name, query.user_id, query.session_id)
        hits = await self.reader.session_search(
            key, query.query, query.scope, query.top_k, filter_key=query.filter_key,
            min_score=max(MIN_SCORE, query.min_score), mode=query.mode,
        )  # fmt: skip
        return [
            SearchHit(
                scope=hit.scope,  # type: ignore[arg-type]  # the read API labels hits with the same four scopes
                session_id=hit.session_id,
                event_id=hit.event_id,
                role=hit.role,
                text=hit.snippet,
                score=hit.score,
                created_at=hit.created,
                tool_call_id=hit.tool_call_id,
                tool_name=hit.tool_name,
                context=hit.context,
                content_bytes=hit.content_bytes,
                content_truncated=hit.content_truncated,
            )
            for hit in hits
        ]

    async def load_window(self, query: WindowQuery) -> Window | None:
        key = SessionKey(query.app_name, query.user_id, query.session_id)
        try:
            result = await self.reader.session_load(
                key, event_id=query.anchor_event_id, tool_call_id=query.tool_call_id, before=query.before,
                after=query.after, content_offset=query.content_offset, content_limit=query.content_limit,
                tool_name_prefix=False,
            )  # fmt: skip
        except AnchorNotFound:
            return None
        return Window(
            result.anchor_event_id,
            [
                WindowEvent(
                    event_id=m.event_id,
                    role=m.role,
                    content=m.text,
                    created_at=m.created,
                    tool_call_id=m.tool_call_id,
                    tool_name=m.tool_name,
                    anchor=m.is_anchor,
                    content_bytes=m.content_bytes,
                    content_offset=m.content_offset,
                    returned_bytes=m.returned_bytes,
                    content_truncated=m.content_truncated,
                    tool_calls=tuple(
                        WindowCall(
                            id=c.id,
                            name=c.name,
                            arguments=c.arguments,
                            arguments_bytes=c.arguments_bytes,
                            arguments_offset=c.arguments_offset,
                            returned_bytes=c.returned_bytes,
                            arguments_truncated=c.arguments_truncated,
                        )
                        for c in m.tool_calls
                    ),
                    payload_bytes=m.payload_bytes,
                    next_content_offset=m.next_content_offset,
                )
                for m in result.messages
            ],
            [WindowSkip(e.event_id, e.role, e.tool_call_ids) for e in result.skipped],
            [WindowCallTurn(t.call_event_id, t.result_event_ids) for t in result.call_turns],
        )
