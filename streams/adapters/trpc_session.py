"""distill as the session service of trpc-agent-py (the ``trpc`` extra).

The guide's flow runs on distill by changing the line that builds the service::

    session_service = DistillSessionService(summarizer_manager=summarizer_manager)

- ``append_event`` publishes the event to Kafka (see :mod:`.trpc_events` for the mapping);
- ``get_session`` returns what the agent should see: a summary event (the guide's
  ``"Previous conversation summary: ..."`` anchor) and the events after its
  boundary, read from Cassandra, plus the session state;
- the summarizer manager answers the guide's calls through distill:
  ``create_session_summary(session, force=True)`` is a ``summarize_sync``;
  ``get_session_summary(session)`` returns the guide's ``SessionSummary``.

The worker summarizes, not this process: the guide's check functions,
``max_summary_length``, ``keep_recent_count`` and ``summarizer_prompt`` become the
app's distill settings (:attr:`DistillSessionService.summary_overrides`, see
:mod:`.trpc_settings`), which the worker must run with
(:meth:`DistillSessionService.worker_settings`). The summarizer's own ``model``
is not called: distill's ``[llm]`` writes the summaries.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from google.genai.types import FunctionDeclaration
from trpc_agent_sdk.abc import CompactSummarizerManagerABC, ListSessionsResponse
from trpc_agent_sdk.context import InvocationContext
from trpc_agent_sdk.events import Event
from trpc_agent_sdk.sessions import BaseSessionService, Session, SessionServiceConfig
from trpc_agent_sdk.sessions.compact.default import DEFAULT_SUMMARIZER_PROMPT, DefaultSessionSummary
from trpc_agent_sdk.tools import BaseTool
from trpc_agent_sdk.types import Content, Part
from trpc_agent_sdk.utils import user_key

from schemas import FunctionCall, SessionEvent, SessionKey, SessionSummary, ToolCall
from schemas.settings import Settings, load_settings
from schemas.text import utf8_record
from streams.adapters.backend import SessionBackend, SessionView
from streams.adapters.native import Clock
from streams.adapters.trpc_events import (
    STATE_FIELD,
    persisted_state,
    state_of,
    to_session_events,
    to_trpc_events,
)
from streams.adapters.trpc_settings import summary_overrides, with_app_overrides
from streams.context.recall_tools import recall_tools

TRUNCATED_STATE_KEY = "temp:distill_view_truncated"
"""Set (``True``) in a session's state when its view stopped at the read's event cap (``SessionView.truncated``):
the oldest events are missing. A ``temp:`` key: never stored, gone from the next view that is whole."""
SUMMARY_PREFIX = "Previous conversation summary: "
"""The guide's summary event text (``DefaultSessionSummarizer``), kept so agents see the same anchor."""


def summary_event(summary: SessionSummary, note: str = "") -> Event:
    """The guide's summary anchor event for a distill summary (first event of the session view); ``note``
    (a ``[distill: …]`` note of the view) after its text."""
    text = SUMMARY_PREFIX + summary.summary + (f"\n\n{note}" if note else "")
    event = Event(
        id=f"distill-summary-{summary.filter_key or 'session'}-v{summary.version}", invocation_id="summary",
        author="system", timestamp=summary.boundary.cutoff_at.timestamp(),
        content=Content(role="user", parts=[Part.from_text(text=text)]),
    )  # fmt: skip
    event.set_summary_event(True)
    return event


def note_event(note: str, before: float) -> Event:
    """The anchor event of a view without a summary that must say what it leaves out (``note``): first,
    stamped just ``before`` the view's first event, kept in front by trpc's windows as the summary's is."""
    event = Event(id="distill-note", invocation_id="summary", author="system", timestamp=before - 0.001,
                  content=Content(role="user", parts=[Part.from_text(text=note)]))  # fmt: skip
    event.set_summary_event(True)
    return event


def _take_summary(session: Session) -> Event | None:
    """distill's summary event, taken out of ``session.events`` (where :meth:`DistillSessionService._fill`
    put it first) while trpc trims the events after it."""
    if session.events and session.events[0].is_summary_event():
        summary: Event = session.events.pop(0)
        return summary
    return None


def _put_summary(session: Session, summary: Event | None) -> None:
    if summary is not None:
        session.events.insert(0, summary)


class DistillSummarizerManager(CompactSummarizerManagerABC):  # type: ignore[misc]  # optional extra, untyped
    """The guide's summarizer manager, answered by distill's worker.

    ``create_session_summary(session, force=True)`` asks for a summary now and
    waits for it; without ``force`` (the Runner's post-turn call) it only
    refreshes ``session.events`` to distill's current view: the worker has
    already decided, from the app's triggers, whether to summarize.
    """

    def __init__(self, summarizer: Any = None, *, auto_summarize: bool = True, timeout: float = 60.0) -> None:
        super().__init__(summarizer)
        self.auto_summarize = auto_summarize
        self.timeout = timeout

    @property
    def service(self) -> DistillSessionService:
        base = self.session_service
        if not isinstance(base, DistillSessionService):
            raise TypeError("DistillSummarizerManager works with a DistillSessionService only")
        return base

    async def create_session_summary(
        self, session: Session, force: bool = False, ctx: InvocationContext | None = None
    ) -> None:
        service = self.service
        if force:
            backend = await service.ready()
            await backend.summarize(service.key_of(session), service.filter_key, force=True, timeout=self.timeout)
        await service.refresh(session)

    async def get_session_summary(self, session: Session) -> DefaultSessionSummary | None:
        """The guide's ``SessionSummary`` of the session's latest distill summary (``None`` before the first)."""
        service = self.service
        view = await service.view_of(service.key_of(session))
        if view.summary is None or not view.summary.summary.strip():
            return None
        record = view.summary
        return DefaultSessionSummary(
            session_id=session.id, summary_text=record.summary, original_event_count=view.stored_events,
            compressed_event_count=1 + len(to_trpc_events(view.events, view.calls_only)),
            summary_timestamp=record.created_at.timestamp(), model_name=record.model or "",
            metadata={"version": record.version, "filter_key": record.filter_key,
                      "boundary": record.boundary.model_dump(mode="json"), "stats": record.stats.model_dump()},
        )  # fmt: skip

    def get_summarizer_metadata(self) -> dict[str, Any]:
        return self.summarizer.get_summary_metadata() if self.summarizer is not None else {}


class DistillSessionService(BaseSessionService):  # type: ignore[misc]  # optional extra, untyped
    """A trpc ``BaseSessionService`` whose sessions live in distill (Kafka + Cassandra).

    ``summarizer_manager``: the guide's ``SummarizerSessionManager`` (its
    summarizer's configuration becomes the app's distill settings) or ``None``.
    ``settings``: distill's (default: :func:`schemas.settings.load_settings`).
    ``backend``: share one :class:`SessionBackend` between services.
    ``filter_key``: the key whose view ``get_session`` returns and summaries
    the manager asks for; the root agent's events are published under it, a
    sub-agent's below it (see :func:`.trpc_events.filter_key_of`).
    """

    def __init__(
        self,
        summarizer_manager: CompactSummarizerManagerABC | None = None,
        *,
        settings: Settings | None = None,
        backend: SessionBackend | None = None,
        session_config: SessionServiceConfig | None = None,
        filter_key: str = "",
    ) -> None:
        summarizer = getattr(summarizer_manager, "summarizer", None)
        self.summary_overrides = summarizer_overrides(summarizer)
        manager = DistillSummarizerManager(
            summarizer, auto_summarize=bool(getattr(summarizer_manager, "_auto_summarize", True))
        )
        super().__init__(summarizer_manager=manager, session_config=session_config)
        self.settings = settings if settings is not None else (backend.settings if backend else load_settings())
        self._backend = backend if backend is not None else SessionBackend(self.settings)
        self._own_backend = backend is None
        self._started = False
        self.filter_key = filter_key
        self._clocks: dict[SessionKey, Clock] = {}
        self._known: dict[tuple[str, str], dict[str, float]] = {}
        self._stored: dict[SessionKey, dict[str, Any]] = {}
        """The state each session's newest event records (what trpc's services call the stored state)."""

    # -- wiring ----------------------------------------------------------------------------------------------

    def worker_settings(self, app_name: str) -> Settings:
        """The settings a distill worker must run with so ``app_name`` follows this summarizer's triggers."""
        return with_app_overrides(self.settings, app_name, self.summary_overrides)

    async def ready(self) -> SessionBackend:
        if not self._started:
            await self._backend.start()
            self._started = True
        return self._backend

    @staticmethod
    def key_of(session: Session) -> SessionKey:
        return SessionKey(session.app_name, session.user_id, session.id)

    def _clock(self, key: SessionKey) -> Clock:
        return self._clocks.setdefault(key, Clock())

    async def view_of(self, key: SessionKey) -> SessionView:
        backend = await self.ready()
        view = await backend.view(key, self.filter_key)
        self._clock(key).seen(view.events, view.summary)
        return view

    # -- BaseSessionService ----------------------------------------------------------------------------------

    async def create_session(
        self, *, app_name: str, user_id: str, state: dict[str, Any] | None = None, session_id: str | None = None,
        agent_context: Any = None,
    ) -> Session:  # fmt: skip
        session_id = (session_id or "").strip() or str(uuid.uuid4())
        session = Session(id=session_id, app_name=app_name, user_id=user_id, state=persisted_state(state or {}),
                          save_key=user_key(app_name, user_id))  # fmt: skip
        self._known.setdefault((app_name, user_id), {})[session_id] = session.last_update_time
        self._stored[self.key_of(session)] = dict(session.state)
        if session.state:
            await self._publish_state(session, session.state)
        return session

    async def get_session(
        self, *, app_name: str, user_id: str, session_id: str, agent_context: Any = None
    ) -> Session | None:
        key = SessionKey(app_name, user_id, session_id)
        view = await self.view_of(key)
        known = session_id in self._known.get((app_name, user_id), {})
        if not view.events and view.summary is None and not known:
            return None
        session = Session(id=session_id, app_name=app_name, user_id=user_id,
                          save_key=user_key(app_name, user_id))  # fmt: skip
        await self._fill(session, view)
        return self.filter_events(session)

    def filter_events(self, session: Session, need_copy: bool = False) -> Session:
        """trpc's trim (``num_recent_events``, ``event_ttl_seconds``) of the events after distill's summary.

        The summary event stays in front: it is the only copy of what lies before its boundary, and its
        stamp (the cutoff) makes it the oldest event, the first any window would drop.
        """
        target = session.model_copy(deep=True) if need_copy else session
        summary = _take_summary(target)
        try:
            super().filter_events(target, need_copy=False)
        finally:
            _put_summary(target, summary)
        return target

    async def refresh(self, session: Session) -> None:
        """Replace ``session.events`` (and state) with distill's current view of it."""
        await self._fill(session, await self.view_of(self.key_of(session)))

    async def _fill(self, session: Session, view: SessionView) -> None:
        events = [e for e in view.events if e.message.role != "system" or (e.model_extra or {}).get("native")]
        trpc_events = [
            e for e in to_trpc_events(events, view.calls_only) if e.content is not None or e.actions.state_delta
        ]
        # The read stopped at its event cap: the history says which older events it leaves out, in the anchor
        # event trpc's windows keep in front (the summary's, else one of its own).
        note = view.cap_note(session_load=self._backend.recall_capabilities.load)
        if view.summary and view.summary.summary.strip():
            session.events = [summary_event(view.summary, note)]
        elif note:
            session.events = [note_event(note, min((e.timestamp for e in trpc_events), default=time.time()))]
        else:
            session.events = []
        session.events += trpc_events
        state = state_of(view.events)
        if state is None and view.summary is not None:
            boundary = await self._backend.boundary_event(view.key, view.summary)
            state = state_of([boundary]) if boundary is not None else None
        if state is None:
            state = self._stored.get(view.key)  # what this process recorded last (e.g. created, nothing since)
        session.state = dict(state) if state is not None else dict(session.state)
        session.state.pop(TRUNCATED_STATE_KEY, None)
        self._stored[self.key_of(session)] = dict(session.state)
        if view.truncated:
            session.state[TRUNCATED_STATE_KEY] = True
        session.conversation_count = sum(1 for e in view.events if e.author == "user" and e.message.role == "user")
        if session.events:
            session.last_update_time = max(e.timestamp for e in session.events)

    async def list_sessions(self, *, app_name: str, user_id: str | None = None) -> ListSessionsResponse:
        if user_id is None:
            raise ValueError("DistillSessionService.list_sessions needs a user_id: distill never reads across users")
        backend = await self.ready()
        found = {sid: at.timestamp() for sid, at in (await backend.session_ids(app_name, user_id)).items()}
        for sid, at in self._known.get((app_name, user_id), {}).items():
            found.setdefault(sid, at)
        sessions = [Session(id=sid, app_name=app_name, user_id=user_id, save_key=user_key(app_name, user_id),
                            last_update_time=at) for sid, at in sorted(found.items())]  # fmt: skip
        return ListSessionsResponse(sessions=sessions)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        backend = await self.ready()
        await backend.delete(SessionKey(app_name, user_id, session_id))
        self._known.get((app_name, user_id), {}).pop(session_id, None)
        self._clocks.pop(SessionKey(app_name, user_id, session_id), None)
        self._stored.pop(SessionKey(app_name, user_id, session_id), None)

    async def append_event(self, session: Session, event: Event) -> Event:
        """Append ``event`` to ``session`` (as the base service does) and publish it to distill.

        Streaming chunks (``partial``) are neither appended nor published, as in
        every trpc session service; the summary anchor event is never published.
        """
        if event.partial:
            return event
        summary = _take_summary(session)
        try:
            event, _ = self._append_event_to_session(session, event)  # trims to ``max_events``
        finally:
            _put_summary(session, summary)
        if not event.is_summary_event():
            backend = await self.ready()
            key = self.key_of(session)
            stored = self._stored.get(key, persisted_state(session.state)) | dict(event.actions.state_delta or {})
            events = to_session_events(event, key, self._clock(key), state=stored, base_key=self.filter_key)
            await backend.publish(events)
            self._stored[key] = stored
            self._known.setdefault((session.app_name, session.user_id), {})[session.id] = event.timestamp
        return event

    async def update_session(self, session: Session) -> None:
        """Persist the session's state as it is (``temp:`` keys too, as trpc's services store the object)
        when it differs from the state distill last recorded. The events are not rewritten: distill
        has every event ``append_event`` published, and its view is the summary plus the events after it."""
        view = await self.view_of(self.key_of(session))
        if state_of(view.events) != session.state:
            await self._publish_state(session, session.state)

    async def update_session_state(self, session: Session, state_delta: dict[str, Any]) -> None:
        """Patch the stored state with ``state_delta`` (every key of it, as trpc's services do)."""
        if not state_delta:
            return
        session.state.update(state_delta)
        key = self.key_of(session)
        await self._publish_state(session, self._stored.get(key, persisted_state(session.state)) | state_delta)

    async def _publish_state(self, session: Session, state: dict[str, Any]) -> None:
        """A state-only event (role ``system``, never summarized or shown) carrying the session state."""
        backend = await self.ready()
        key = self.key_of(session)
        self._stored[key] = dict(state)
        event = utf8_record(SessionEvent.model_validate(
            {
                "app_name": key.app_name, "user_id": key.user_id, "session_id": key.session_id,
                "event_id": f"state-{uuid.uuid4().hex}", "timestamp": self._clock(key).next(datetime.now(UTC)),
                "author": "distill", "message": {"role": "system", "content": None}, "skip_summarization": True,
                STATE_FIELD: json.loads(json.dumps(state, default=str)),
            }
        ))  # fmt: skip
        await backend.publish([event])

    async def close(self) -> None:
        await super().close()
        if self._own_backend and self._started:
            await self._backend.close()
            self._started = False

    # -- recall ----------------------------------------------------------------------------------------------

    def recall_tools(self) -> list[BaseTool]:
        """``session_search`` / ``session_load`` as trpc tools answering from the running session's history."""
        return [
            DistillRecallTool(self, schema["function"]) for schema in recall_tools(self._backend.recall_capabilities)
        ]


class DistillRecallTool(BaseTool):  # type: ignore[misc]  # optional extra, untyped
    """One recall tool; the session is the invocation's (``tool_context.session``)."""

    def __init__(self, service: DistillSessionService, function: dict[str, Any]) -> None:
        super().__init__(name=str(function["name"]), description=str(function["description"]))
        self._service = service
        self._parameters = function["parameters"]

    def _get_declaration(self) -> FunctionDeclaration:
        return FunctionDeclaration(name=self.name, description=self.description,
                                   parameters_json_schema=self._parameters)  # fmt: skip

    async def _run_async_impl(self, *, tool_context: InvocationContext, args: dict[str, Any]) -> Any:
        backend = await self._service.ready()
        key = DistillSessionService.key_of(tool_context.session)
        executor = backend.recall(key, self._service.filter_key)
        function = FunctionCall(name=self.name, arguments=json.dumps(args, ensure_ascii=False))
        call = ToolCall(id=f"call-{uuid.uuid4().hex[:8]}", function=function)
        answer = await executor.execute(call)
        return json.loads(answer.content or "{}")


def summarizer_overrides(summarizer: Any) -> dict[str, Any]:
    """The distill overrides of a guide ``SessionSummarizer`` (``None``: the guide's defaults)."""
    if summarizer is None:
        return summary_overrides(None)
    metadata = summarizer.get_summary_metadata() if hasattr(summarizer, "get_summary_metadata") else {}
    return summary_overrides(
        getattr(summarizer, "check_summarizer_functions", None),
        max_summary_length=getattr(summarizer, "max_summary_length", None),
        keep_recent_count=metadata.get("keep_recent_count"),
        summarizer_prompt=getattr(summarizer, "_summarizer_prompt", None),
        default_prompt=DEFAULT_SUMMARIZER_PROMPT,
    )
