"""An in-memory implementation of the recall read protocol, for tests."""

from __future__ import annotations

from collections.abc import Sequence

from projections.windows import slice_payload
from schemas import SessionEvent, SessionSummary
from streams.context.history import covered_mask
from streams.context.recall_tools import SearchHit, SearchQuery, Window, WindowCall, WindowEvent, WindowQuery


def _text(event: SessionEvent) -> str:
    return event.message.content or ""


def _eligible(event: SessionEvent) -> bool:
    msg = event.message
    return (
        not event.partial
        and not msg.tool_calls
        and msg.role in ("user", "assistant", "tool")
        and bool(_text(event).strip())
    )


def _loadable(event: SessionEvent) -> bool:
    """An anchor by event id (the read API's rule): any complete event."""
    return not event.partial


class InMemoryReadAPI:
    """Events and latest summaries held in lists; lexical search by term overlap."""

    def __init__(self, events: Sequence[SessionEvent], summaries: Sequence[SessionSummary] = ()) -> None:
        self.events = list(events)
        self.summaries = {(s.app_name, s.user_id, s.session_id, s.filter_key): s for s in summaries}
        self.search_calls = 0

    def _session(self, app: str, user: str, session: str) -> list[SessionEvent]:
        return [e for e in self.events if (e.app_name, e.user_id, e.session_id) == (app, user, session)]

    def _hidden(self, query: SearchQuery) -> list[SessionEvent]:
        summary = self.summaries.get((query.app_name, query.user_id, query.session_id, query.filter_key))
        if summary is None:
            return []
        events = self._session(query.app_name, query.user_id, query.session_id)
        return [e for e, covered in zip(events, covered_mask(events, summary.boundary), strict=True) if covered]

    def _others(self, query: SearchQuery) -> list[SessionEvent]:
        return [
            e
            for e in self.events
            if (e.app_name, e.user_id) == (query.app_name, query.user_id) and e.session_id != query.session_id
        ]

    async def search(self, query: SearchQuery) -> Sequence[SearchHit]:
        self.search_calls += 1
        pools = {
            "current_hidden": [("current_hidden", e) for e in self._hidden(query)],
            "current_session": [
                ("current_session", e) for e in self._session(query.app_name, query.user_id, query.session_id)
            ],
            "other_sessions": [("other_sessions", e) for e in self._others(query)],
        }
        pools["all_sessions"] = pools["current_hidden"] + pools["other_sessions"]
        terms = query.query.lower().split()
        hits = []
        for scope, event in pools[query.scope]:
            if not _eligible(event):
                continue
            text = _text(event).lower()
            score = sum(t in text for t in terms) / len(terms)
            if score > 0 and score >= query.min_score:
                hits.append(
                    SearchHit(
                        scope=scope,  # type: ignore[arg-type]
                        session_id=event.session_id,
                        event_id=event.event_id,
                        role=event.message.role,
                        text=_text(event),
                        score=score,
                        created_at=event.timestamp,
                        tool_call_id=event.message.tool_call_id,
                        tool_name=event.message.name,
                    )
                )
        hits.sort(key=lambda h: -h.score)
        return hits[: query.top_k]

    async def load_window(self, query: WindowQuery) -> Window | None:
        session = self._session(query.app_name, query.user_id, query.session_id)
        anchor = next((e for e in session if e.event_id == query.anchor_event_id and _loadable(e)), None)
        if anchor is None and query.tool_call_id:
            resolved = self._find_tool_result(query.app_name, query.user_id, query.session_id, query.tool_call_id)
            anchor = next((e for e in session if e.event_id == resolved and _eligible(e)), None)
        if anchor is None:
            return None
        at = session.index(anchor)
        earlier = [e for e in session[:at] if _eligible(e)][-query.before :] if query.before else []
        later = [e for e in session[at + 1 :] if _eligible(e)][: query.after]
        window = [*earlier, anchor, *later]
        return Window(anchor.event_id, [self._sliced(e, e is anchor, query) for e in window])

    @staticmethod
    def _sliced(event: SessionEvent, anchor: bool, query: WindowQuery) -> WindowEvent:
        full = event.shown_text if anchor else _text(event)
        calls = event.message.tool_calls if anchor else ()
        page = slice_payload([full, *(c.function.arguments for c in calls)], query.content_offset if anchor else 0,
                             query.content_limit)  # fmt: skip
        piece = page.parts[0]
        return WindowEvent(
            event_id=event.event_id,
            role=event.message.role,
            content=piece.text,
            created_at=event.timestamp,
            tool_call_id=event.message.tool_call_id,
            tool_name=event.message.name,
            anchor=anchor,
            content_bytes=piece.content_bytes,
            content_offset=piece.content_offset,
            returned_bytes=piece.returned_bytes,
            content_truncated=piece.truncated,
            tool_calls=tuple(
                WindowCall(
                    call.id,
                    call.function.name,
                    part.text,
                    part.content_bytes,
                    part.content_offset,
                    part.returned_bytes,
                    part.truncated,
                )
                for call, part in zip(calls, page.parts[1:], strict=True)
            ),
            payload_bytes=page.payload_bytes,
            next_content_offset=page.next_offset if anchor else None,
        )

    def _find_tool_result(self, app_name: str, user_id: str, session_id: str, tool_call_id: str) -> str | None:
        for event in reversed(self._session(app_name, user_id, session_id)):
            if event.message.role == "tool" and event.message.tool_call_id == tool_call_id:
                return event.event_id
        return None
