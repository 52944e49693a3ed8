"""distill as a ``Session`` of the OpenAI Agents SDK (the ``agents`` extra).

    async with SessionBackend(settings) as backend:
        session = DistillSession("s-1", backend, app_name="travel", user_id="alice")
        agent = Agent(name="assistant", instructions="...", tools=[*my_tools, *session.recall_tools()])
        result = await Runner.run(agent, "Where did I say I fly from?", session=session)

``add_items`` publishes each Responses-API item as a session event (the item
kept whole, see :mod:`.openai_agents_items`); ``get_items`` returns what the
next request needs — the key's summary as a system item, then the items after
its boundary, older tool outputs compacted (with the event id ``session_load``
reads them back by). ``recall_tools()`` are ``session_search`` / ``session_load``
as function tools. ``clear_session`` publishes the ``delete_session`` tombstone.
The SDK's session has no place for read metadata: ``last_view`` is the view the
last call read (``last_view.truncated``: its read stopped at the event cap, the
oldest events are missing; logged as a warning too).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from agents import FunctionTool
from agents.memory.session import SessionABC
from agents.memory.session_settings import resolve_session_limit

from schemas import FunctionCall, SessionEvent, SessionKey, SessionSummary, ToolCall
from streams.adapters.backend import SessionBackend, SessionView
from streams.adapters.native import Clock
from streams.adapters.openai_agents_items import event_to_items, item_call_id, item_to_event, summary_item
from streams.context.compaction import CompactionConfig, compact
from streams.context.items import HistoryItem
from streams.context.recall_tools import RecallCapabilities, recall_tools
from streams.rules.tokens import get_token_counter

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory.session_settings import SessionSettings
    from agents.tool_context import ToolContext

RETRACTS_FIELD = "retracts"
"""On a marker of the first builds: the id of the event taken back whole (with ``retracts_item``, one item of it)."""
RETRACTS_ITEM_OF_FIELD = "retracts_item_of"
"""Set on the marker event ``pop_item`` publishes: the id of the event an item is taken back from.

Not ``retracts``: a build that knows only ``retracts`` reads it as the whole event taken back, and
would hide the event's other items from its agents' requests (history gone without a word). Such a
build ignores this field: the popped item stays in its view, nothing else changes."""
RETRACTS_ITEM_FIELD = "retracts_item"
"""Beside it: the index of the item taken back among the event's items."""
DEFAULT_COMPACTION = CompactionConfig(enabled=True, tool_result_max_tokens=256)


class DistillSession(SessionABC):  # type: ignore[misc]  # the SDK is an optional extra, not type-checked
    """The Agents SDK session of ``(app_name, user_id, session_id)`` stored in distill.

    ``compaction`` shrinks tool outputs of earlier requests in ``get_items``
    (``CompactionConfig(enabled=False)`` returns them whole); ``filter_key``
    selects a branch (``""``: the whole session): the items are published
    under it and ``get_items`` shows its view. The SDK's items name no agent,
    so a sub-agent gets its branch through its own session, e.g.
    ``research.as_tool(..., session=DistillSession(session_id, backend, ...,
    filter_key="<app>/research"))``; a handoff stays in the session's key.
    """

    def __init__(
        self,
        session_id: str,
        backend: SessionBackend,
        *,
        app_name: str,
        user_id: str,
        agent_name: str = "assistant",
        filter_key: str = "",
        compaction: CompactionConfig = DEFAULT_COMPACTION,
        session_settings: SessionSettings | None = None,
    ) -> None:
        self.session_id = session_id
        self.session_settings = session_settings
        self.backend = backend
        self.key = SessionKey(app_name, user_id, session_id)
        self.agent_name = agent_name
        self.filter_key = filter_key
        self.compaction = compaction
        self._clock = Clock()
        self._request_id: str | None = None
        self.last_view: SessionView | None = None

    # -- the Session protocol --------------------------------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The summary item (when there is a summary), then the items after its boundary (compacted).

        When the read stopped at its event cap (``last_view.truncated``), a system item after the summary's
        says which older events are left out and how to read them back (``SessionView.cap_note``).

        With ``limit`` (else ``session_settings.limit``), the latest ``limit`` items after the summary item.
        """
        view = await self._view()
        items = self.items_of(view)
        head = [summary_item(view.summary.summary)] if view.summary and view.summary.summary.strip() else []
        note = view.cap_note(session_load=self.backend.recall_capabilities.load)
        if note:  # the read stopped at its event cap: the history says what it leaves out (never popped)
            head.append({"role": "system", "content": note})
        limit = resolve_session_limit(limit, self.session_settings)
        if limit is not None and limit >= 0:  # SQLiteSession's semantics: 0 gives none, a negative limit all
            items = items[-limit:] if limit > 0 else []
        return [*head, *items]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Publish ``items`` in order, one event each; a user message starts a new request."""
        if not items:
            return
        if self._request_id is None:
            await self._resume()
        events = []
        for item in items:
            record: dict[str, Any] = dict(item)
            if record.get("role") == "user" and record.get("type") in (None, "message"):
                self._request_id = f"req-{uuid.uuid4().hex[:12]}"
            request_id = self._request_id or f"req-{uuid.uuid4().hex[:12]}"
            self._request_id = request_id
            events.append(
                item_to_event(
                    record,
                    self.key,
                    event_id=f"ev-{uuid.uuid4().hex}",
                    timestamp=self._clock.next(datetime.now(UTC)),
                    request_id=request_id,
                    agent_name=self.agent_name,
                    filter_key=self.filter_key,
                )
            )
        await self.backend.publish(events)

    async def pop_item(self) -> TResponseInputItem | None:
        """Take back the newest visible item, and only it: it leaves the view (a summary that already covers it
        keeps it).

        An event another producer published may stand for several items (an assistant message with
        text and tool calls); popping takes back its last visible item and leaves the others in the view,
        as ``SQLiteSession.pop_item`` does with its rows. The item is returned as stored (not compacted).
        """
        view = await self._view()
        shown = self._shown_items(view)
        if not shown:
            return None
        last, index, item = shown[-1]
        marker = SessionEvent.model_validate(
            {
                "app_name": self.key.app_name, "user_id": self.key.user_id, "session_id": self.key.session_id,
                "event_id": f"ev-{uuid.uuid4().hex}", "timestamp": self._clock.next(datetime.now(UTC)),
                "request_id": last.request_id, "invocation_id": last.invocation_id, "author": "distill",
                "filter_key": self.filter_key,
                "message": {"role": "system", "content": None}, "skip_summarization": True,
                RETRACTS_ITEM_OF_FIELD: last.event_id, RETRACTS_ITEM_FIELD: index,
            }
        )  # fmt: skip
        await self.backend.publish([marker])
        return item  # a Responses-API input item, as it was added

    async def clear_session(self) -> None:
        """Delete the session in distill (events, summaries and state: the ``delete_session`` tombstone)."""
        await self.backend.delete(self.key)
        self._request_id = None
        self.last_view = None

    # -- distill extras --------------------------------------------------------------------------------------

    def recall_tools(self) -> list[FunctionTool]:
        """``session_search`` / ``session_load`` as function tools answering from this session's history."""
        executor = self.backend.recall(self.key, self.filter_key)
        caps: RecallCapabilities = self.backend.recall_capabilities
        tools = []
        for schema in recall_tools(caps):
            fn = schema["function"]
            name = str(fn["name"])

            async def invoke(ctx: ToolContext[Any], arguments: str, _name: str = name) -> str:
                call_id = getattr(ctx, "tool_call_id", None) or f"call-{uuid.uuid4().hex[:8]}"
                answer = await executor.execute(
                    ToolCall(id=call_id, function=FunctionCall(name=_name, arguments=arguments))
                )
                return answer.content or ""

            tools.append(FunctionTool(name=name, description=str(fn["description"]),
                                      params_json_schema=fn["parameters"], on_invoke_tool=invoke,
                                      strict_json_schema=False))  # fmt: skip
        return tools

    async def summarize(self, *, force: bool = True, timeout: float = 60.0) -> SessionSummary | None:
        """Ask distill for a summary now (``summarize_sync``); the newest summary, or ``None``."""
        return await self.backend.summarize(self.key, self.filter_key, force=force, timeout=timeout)

    def items_of(self, view: SessionView) -> list[dict[str, Any]]:
        """The items of ``view``'s events, tool outputs of earlier requests compacted."""
        events = self._visible(view)
        texts = self._compacted_texts(events)
        return [item for _, _, item in self._shown_items(view, texts)]

    @staticmethod
    def _taken_back(view: SessionView) -> dict[str, set[int] | None]:
        """What ``pop_item``'s markers in ``view`` took back: event id -> item indices (``None``: all of it).

        Three forms: ``retracts_item_of`` + ``retracts_item`` (one item; what this build writes),
        ``retracts`` + ``retracts_item`` (one item; the builds before it) and ``retracts`` alone
        (the whole event; the first builds). A ``retracts_item_of`` marker without its index takes
        back nothing (a marker this build cannot place must not hide a whole event).
        """
        taken: dict[str, set[int] | None] = {}
        for event in view.events:
            extra = event.model_extra or {}
            item_of = extra.get(RETRACTS_ITEM_OF_FIELD)
            target = item_of or extra.get(RETRACTS_FIELD)
            if not target:
                continue
            index = extra.get(RETRACTS_ITEM_FIELD)
            if item_of and not isinstance(index, int):
                continue
            known = taken.get(str(target), set())
            if index is None or known is None:
                taken[str(target)] = None  # a marker of the first builds: the whole event
            else:
                known.add(int(index))
                taken[str(target)] = known
        return taken

    def _shown_items(
        self, view: SessionView, texts: dict[str, str] | None = None
    ) -> list[tuple[SessionEvent, int, dict[str, Any]]]:
        """The items ``view`` shows, each with its event and its index among the event's items.

        The index is among the whole event's items (what ``pop_item``'s markers record), also for a
        covered event the view shows for some of its calls only (``SessionView.calls_only``): of its
        items, those calls alone are shown.
        """
        taken = self._taken_back(view)
        out: list[tuple[SessionEvent, int, dict[str, Any]]] = []
        for event in self._visible(view):
            gone = taken.get(event.event_id, set()) or set()
            items = event_to_items(event, (texts or {}).get(event.event_id))
            only = view.calls_only.get(event.event_id)
            out.extend(
                (event, i, item)
                for i, item in enumerate(items)
                if i not in gone and (only is None or _call_id_of(item) in only)
            )
        return out

    @classmethod
    def _visible(cls, view: SessionView) -> list[SessionEvent]:
        """The events of ``view`` that stand for items: ``pop_item``'s markers and the events it took back
        whole left out (an event some items of which were taken back stays, see :meth:`_shown_items`)."""
        taken = cls._taken_back(view)
        return [e for e in view.events if not _is_marker(e) and not (e.event_id in taken and taken[e.event_id] is None)]

    def _compacted_texts(self, events: list[SessionEvent]) -> dict[str, str]:
        """New texts of the tool results compaction shortened, by event id."""
        if not self.compaction.enabled:
            return {}
        items = [HistoryItem(e.message, e.event_id, e.request_id, e.invocation_id) for e in events
                 if e.message.role in ("user", "assistant", "tool")]  # fmt: skip
        current = next((i.unit_key for i in reversed(items) if i.message.role == "user"), None)
        load = self.backend.recall_capabilities.load
        compacted, _ = compact(items, self.compaction, get_token_counter(), current_unit=current, session_load=load)
        return {
            new.event_id: new.message.content or ""
            for old, new in zip(items, compacted, strict=True)
            if new.event_id and new.message.content != old.message.content
        }

    async def _view(self) -> SessionView:
        view = await self.backend.view(self.key, self.filter_key)
        self._clock.seen(view.events, view.summary)
        self.last_view = view
        return view

    async def _resume(self) -> None:
        """Continue the request of the newest stored event (a new session object on an old session)."""
        view = await self._view()
        if view.events:
            self._request_id = view.events[-1].request_id or None


def _call_id_of(item: dict[str, Any]) -> str | None:
    """The call id of a ``function_call`` / ``custom_tool_call`` item (``None``: another item)."""
    if item.get("type") not in ("function_call", "custom_tool_call"):
        return None
    return item_call_id(item)


def _is_marker(event: SessionEvent) -> bool:
    """A ``pop_item`` marker, of any build (it stands for no item)."""
    extra = event.model_extra or {}
    return bool(extra.get(RETRACTS_ITEM_OF_FIELD) or extra.get(RETRACTS_FIELD))
