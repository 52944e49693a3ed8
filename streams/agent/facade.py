"""The agent facade: a runtime's loop on distill in a few lines.

    async with SessionBackend(load_settings()) as backend:
        agent = DistillAgent(backend, app_name="travel", user_id="alice", session_id="s-1", model="gpt-4o")
        await agent.user("What's the weather in Lisbon?")
        while True:
            request = await agent.next_request(SYSTEM_PROMPT, tools=[WEATHER_TOOL])
            reply = (await llm.chat.completions.create(model="gpt-4o", **request.kwargs())).choices[0].message
            await agent.record(reply)
            if not await agent.run_tools(reply, {"get_weather": get_weather}):
                break

- :meth:`DistillAgent.user` / :meth:`~DistillAgent.record` / :meth:`~DistillAgent.run_tools`
  publish what the user, the model and the tools produced (one session event each);
- :meth:`~DistillAgent.next_request` reads the key's context from Cassandra (the one
  :meth:`ContextReader.read <projections.context_read.ContextReader.read>`) and assembles
  the request (:func:`~streams.context.assemble_from_read`): summary injection, compaction,
  the recall tools, and fitting into the model's window (:mod:`streams.context.fitting`);
- :meth:`~DistillAgent.run_tools` answers ``session_search`` / ``session_load`` from
  Cassandra (:class:`~streams.context.RecallExecutor`) and the runtime's tools by name.

Its settings are ``Settings.agent`` (:class:`~schemas.settings.AgentSettings`, Go's llmagent
options), overridable per facade by keyword. The facade holds no history: only the ids of
the events it published that Cassandra does not show yet (the projection lag), which
``next_request`` waits for, so a request never misses what was just said.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from projections.errors import AnchorNotFound
from schemas import Message, SessionEvent, SessionKey, SessionSummary, ToolCall
from schemas.reads import AppliedSummary, ContextRead, ProjectionLag
from schemas.settings import AgentSettings
from schemas.text import utf8_record
from streams.adapters.backend import SessionBackend
from streams.adapters.native import Clock
from streams.agent.messages import InvalidMessageError, is_function_result, to_message, to_usage
from streams.agent.options import assembly_options, recall_capabilities, refresh_at
from streams.agent.tools import LocalTool, error_result, run_local_tool
from streams.client import SummaryTimeoutError, SummaryUnavailableError, encoded_within
from streams.context.assembly import AssemblyOptions, AssemblyReport
from streams.context.fitting import Fitted, fit
from streams.context.from_read import assemble_from_read, left_out_by_cap, needs_full_history
from streams.context.history import covered_mask
from streams.context.injection import SummaryFormatter
from streams.context.recall_tools import RecallExecutor
from streams.errors import DistillError, RecordTooLargeError
from streams.rules.boundaries import covers
from streams.rules.filter_keys import related

log = logging.getLogger("distill.agent")
MAX_FORCED_REFRESHES = 3
"""Forced summaries one request may ask for while it would still drop history."""
_FIRST_POLL_S = 0.02
_MAX_POLL_S = 0.25


class ProjectionBehindError(DistillError):
    """Cassandra did not show the facade's latest events within ``projection_wait_s``: no request was built.

    ``lag`` is the read's projection lag (how far the projector is behind); ``missing`` the ids not shown.
    """

    def __init__(self, message: str, lag: ProjectionLag, missing: Sequence[str]) -> None:
        super().__init__(message)
        self.lag = lag
        self.missing = tuple(missing)


@dataclass(frozen=True)
class AgentRequest:
    """The next model request and how it was built.

    ``summary``: the summary injected (``None``: none applies, or injection is off).
    ``summary_refreshed``: a summary was asked for before this request and the request built on it.
    ``cut_tokens``: payloads above this many tokens were cut to fit the budget (tool results, and
    ``report.payload_cuts``: the tool-call arguments and message texts cut with them).
    ``dropped_messages``: messages tailoring still had to leave out (logged; a note in the request's latest
    user turn names their events, ``report.tailored_event_ids``).
    """

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    report: AssemblyReport
    summary: AppliedSummary | None
    budget: int | None
    summary_refreshed: bool = False
    cut_tokens: int | None = None
    projection_lag: ProjectionLag = field(default_factory=ProjectionLag)
    index_lag: ProjectionLag = field(default_factory=ProjectionLag)
    """How far the recall index is behind: ``session_search`` may not find the newest events yet."""
    deep_index_lag: ProjectionLag = field(default_factory=ProjectionLag)
    """How far the index's deep stage is behind: a detail deep in a newer large tool result may not be found yet."""
    read_truncated: bool = False
    """The read stopped at its event cap (``ContextReader.max_events``): the oldest events it would show are
    missing (with summaries off, or a summary not shown, the oldest of the whole history), or the user message
    the request answers (``streams.context.from_read.left_out_by_cap``)."""

    @property
    def dropped_messages(self) -> int:
        return self.report.tailored_messages

    def kwargs(self) -> dict[str, Any]:
        """``messages`` and (when there are any) ``tools``, for ``chat.completions.create(**...)``."""
        return {"messages": self.messages, **({"tools": self.tools} if self.tools else {})}


@dataclass
class _Run:
    """The current run: one user request and the model calls answering it."""

    request_id: str
    invocation_id: str
    user_event_id: str | None = None
    model_calls: int = 0
    legacy_call: ToolCall | None = None
    """The last ``function_call`` (functions API) recorded, unanswered: a ``role: "function"`` result answers it."""


class DistillAgent:
    """One agent's view of one session (or one branch: ``filter_key``) on a shared :class:`SessionBackend`.

    ``model`` is the agent model's name: it picks the window (unless
    ``context_window`` is set) and is recorded on the events, so the worker's
    context-ratio trigger uses the same window. ``options`` (default: the
    backend settings' ``agent`` section) and keyword ``overrides`` (any
    :class:`~schemas.settings.AgentSettings` field) configure it;
    ``summary_formatter`` is Go's ``WithSummaryFormatter``. Not safe for
    concurrent use by several tasks: a session's loop is sequential.
    """

    def __init__(
        self,
        backend: SessionBackend,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        filter_key: str = "",
        agent_name: str = "assistant",
        model: str | None = None,
        options: AgentSettings | None = None,
        summary_formatter: SummaryFormatter | None = None,
        **overrides: Any,
    ) -> None:
        base = options if options is not None else backend.settings.agent
        self.options = AgentSettings.model_validate({**base.model_dump(), **overrides}) if overrides else base
        self.backend = backend
        self.key = SessionKey(app_name, user_id, session_id)
        self.filter_key = filter_key
        self.agent_name = agent_name
        self.model = model
        self.summary_formatter = summary_formatter
        self._clock = Clock()
        self._seeded = False
        self._run: _Run | None = None
        self._unconfirmed: list[tuple[str, datetime, int | None]] = []
        """Published events a read has not shown yet: id, timestamp, log position (offset)."""
        self._summary_floor: tuple[int, int] | None = None
        """``(epoch, version)`` of the newest summary of the key this facade was answered with: reads wait for it."""
        self._recall: RecallExecutor | None = None

    # -- what happened ---------------------------------------------------------------------------------------

    async def user(
        self, content: str | Message | Mapping[str, Any] | object, *, request_id: str | None = None
    ) -> SessionEvent:
        """Publish the user's message: it starts a new run (request and invocation ``request_id``, default new)."""
        msg = Message(role="user", content=content) if isinstance(content, str) else to_message(content)
        if msg.role != "user":
            raise InvalidMessageError(f"user() takes a user message, got role {msg.role!r} (use record())")
        await self._seed()
        rid = request_id or f"req-{uuid.uuid4().hex[:12]}"
        self._run = _Run(request_id=rid, invocation_id=rid)
        event = self._event(msg, self._run)
        self._run.user_event_id = event.event_id
        await self._publish([event])
        return event

    async def record(
        self, message: Message | Mapping[str, Any] | object, *, usage: object | None = None
    ) -> SessionEvent:
        """Publish what the model (or a tool) produced: an assistant reply or a tool result, in the current run.

        Takes a :class:`~schemas.Message`, a chat-completions dict or the ``openai``
        client's message object; ``usage`` is the response's token counts. A user
        message starts a new run (as :meth:`user`).

        A reply of the deprecated functions API (``function_call``) is recorded with
        its one tool call, id ``call-<the event's id>``; the ``role: "function"``
        result recorded after it (which names the function, not the call) is that
        call's ``tool`` result. A ``function`` result with no such call before it in
        the run raises ``InvalidMessageError``.
        """
        event_id = _new_event_id()
        if is_function_result(message):
            run = await self._current_run()
            msg = to_message(message, call_id=self._legacy_answered(run, message))
        else:
            msg = to_message(message, call_id=f"call-{event_id}")
            if msg.role == "user":
                return await self.user(msg)
            run = await self._current_run()
        event = self._event(msg, run, usage=to_usage(usage), event_id=event_id)
        await self._publish([event])
        self._note_legacy(run, event)
        return event

    def _legacy_answered(self, run: _Run, message: object) -> str:
        """The id of the recorded ``function_call`` a ``role: "function"`` result answers."""
        pending = run.legacy_call
        name = message.get("name") if isinstance(message, Mapping) else getattr(message, "name", None)
        if pending is None or (name is not None and name != pending.function.name):
            raise InvalidMessageError(
                f"a role 'function' result (function {name!r}) answers no function_call recorded before it "
                "in this run: send it as role 'tool' with the call's tool_call_id"
            )
        return pending.id

    @staticmethod
    def _note_legacy(run: _Run, event: SessionEvent) -> None:
        """Keep the run's unanswered functions-API call up to date with an event published."""
        msg = event.message
        if msg.role == "assistant" and [c.id for c in msg.tool_calls] == [f"call-{event.event_id}"]:
            run.legacy_call = msg.tool_calls[0]
        elif msg.role == "tool" and run.legacy_call is not None and msg.tool_call_id == run.legacy_call.id:
            run.legacy_call = None

    async def run_tools(
        self, reply: Message | Mapping[str, Any] | object, tools: Mapping[str, LocalTool] | None = None
    ) -> list[Message]:
        """Answer every tool call of ``reply`` in order, publish the results, and return them (``[]``: no calls).

        ``session_search`` / ``session_load`` are answered from Cassandra (when
        ``enable_on_demand_session``, unless ``tools`` names them); any other call
        by ``tools[name](**arguments)``
        (see :mod:`streams.agent.tools`). Failures are answered to the model as
        ``{"error": ...}``, never raised; so is a result too large to record (over
        ``kafka.max_record_bytes`` as an event): what the model is shown is what the session keeps.
        """
        calls = self._calls_of(reply)
        if not calls:
            return []
        results: list[Message] = []
        try:
            for call in calls:
                results.append(await self._answer(call, tools or {}))
        finally:
            # Cancelled (or failed) part way: the results already produced are published all the same —
            # their tools ran, their side effects happened, and the next request must show them.
            if results:
                run = await self._current_run()
                answered = zip(results, calls, strict=False)  # results: the first calls' (fewer when cut short)
                recorded = [self._recordable(self._event(result, run), call) for result, call in answered]
                events = [event for event, _ in recorded]
                results[:] = [e.message for e in events]
                await asyncio.shield(self._publish(events, [value for _, value in recorded]))
                for event in events:
                    self._note_legacy(run, event)
        return results

    def _calls_of(self, reply: Message | Mapping[str, Any] | object) -> tuple[ToolCall, ...]:
        """``reply``'s tool calls; a functions-API ``function_call`` has the id it was recorded with."""
        pending = self._run.legacy_call if self._run is not None else None
        if pending is not None:
            calls = to_message(reply, call_id=pending.id).tool_calls
            if len(calls) == 1 and calls[0] == pending:
                return calls
        return to_message(reply).tool_calls

    def _recordable(self, event: SessionEvent, call: ToolCall) -> tuple[SessionEvent, bytes]:
        """``event``, or, when it is over the record limit, the same event answering ``call`` with an error;
        with its value as it is published (encoded once: the size checked is the size sent).

        Raised instead (``RecordTooLargeError``), the batch's other results, their tools run, were
        never published; sent, the worker refused it and no summary held it.
        """
        limit = self.backend.settings.kafka.max_record_bytes
        try:
            return event, encoded_within(event, limit)
        except RecordTooLargeError as exc:
            size = exc.size
        log.warning("tool result over the record limit answered as an error",
                    extra={"session_id": self.key.session_id, "event_id": event.event_id,
                           "tool_name": call.function.name, "bytes": size, "limit": limit})  # fmt: skip
        error = error_result(
            call,
            f"the tool's result is {size} bytes as a session event, over the limit of {limit} bytes "
            "(kafka.max_record_bytes): it was not kept; ask for a smaller part",
        )
        answered = event.model_copy(update={"message": error})
        return answered, encoded_within(answered, limit)

    async def _answer(self, call: ToolCall, tools: Mapping[str, LocalTool]) -> Message:
        recall = self.recall
        if recall is not None and recall.handles(call.function.name) and call.function.name not in tools:
            return await recall.execute(call)
        return await run_local_tool(call, tools)

    @property
    def recall(self) -> RecallExecutor | None:
        """The ``session_search`` / ``session_load`` executor (``None`` without ``enable_on_demand_session``)."""
        caps = recall_capabilities(self.options)
        if self._recall is None and caps.any:
            self._recall = self.backend.recall(self.key, self.filter_key, capabilities=caps)
        return self._recall

    # -- the next request ------------------------------------------------------------------------------------

    async def next_request(self, system_prompt: str = "", tools: Sequence[Mapping[str, Any]] = ()) -> AgentRequest:
        """The request for the next model call of the current run, built from Cassandra alone.

        1. With ``sync_summary_intra_run``, from the run's second call on: a
           ``summarize_sync`` (``force=False``) first, as Go's flow does.
        2. The read (waiting until it shows every event this facade published;
           the whole history, not only the events after the boundary, when the
           request will not show the summary: ``read_truncated`` says when its
           event cap left the oldest out) and the assembly, fitted into the
           budget (tool results, then tool-call arguments, then message texts
           cut before dropped rounds, :func:`streams.context.fitting.fit`).
        3. A summary is asked for, and the request rebuilt on it, when the
           request reaches the refresh threshold (compaction and summaries on;
           ``force=False``, once, as Go's pre-call refresh) or while it would
           still drop history and events lie after the boundary (summaries
           on; ``force=True``, up to ``MAX_FORCED_REFRESHES`` times). The request
           waits for the key's job in flight and answers with the summary that
           covers the requested events (``summary_timeout_s``). A summary that
           alone exceeds the budget is sent as it is (only the model shortens
           it): ``report.over_budget`` says so.

        Raises :class:`ProjectionBehindError` when Cassandra does not show the
        published events within ``projection_wait_s``.
        """
        run = await self._current_run()
        opts = self.options
        refreshed = False
        assembly = assembly_options(opts, filter_key=self.filter_key, model=self.model,
                                    summary_formatter=self.summary_formatter)  # fmt: skip
        read = await self._read_for(assembly)
        if opts.sync_summary_intra_run and opts.add_session_summary and run.model_calls > 0:
            # the answer is the key's newest summary (the round's job's once it is done): only a newer
            # version than the read's counts as a refresh
            synced = await self._refresh(force=False)
            if synced is not None and _newer(synced, read, self.filter_key):
                refreshed = True
                read = await self._read_for(assembly)
        fitted = self._fit(system_prompt, read, tools, assembly)
        threshold = refresh_at(opts, self.model)
        due = threshold is not None and fitted.request.report.prompt_tokens >= threshold
        for _ in range(MAX_FORCED_REFRESHES):
            force = opts.add_session_summary and fitted.needs_summary and self._after_boundary(read)
            if not (force or due):
                break
            due = False
            summary = await self._refresh(force=force)  # waits for the key's job in flight, if any
            if summary is None or not _newer(summary, read, self.filter_key):
                break
            read = await self._read_for(assembly)
            fitted = self._fit(system_prompt, read, tools, assembly)
            refreshed = True
        run.model_calls += 1
        request = fitted.request
        if fitted.dropped_messages:
            log.warning(
                "request over the budget: tailoring left out %d messages no summary holds (events %s)",
                fitted.dropped_messages, ", ".join(request.report.tailored_event_ids),
                extra={"session_id": self.key.session_id, "filter_key": self.filter_key,
                       "budget": assembly.token_budget, "prompt_tokens": request.report.prompt_tokens},
            )  # fmt: skip
        read_truncated = left_out_by_cap(read, answers_read_current=True)
        if read_truncated:
            log.warning(
                "context read stopped at its event cap: the oldest events of the history it shows are missing",
                extra={"session_id": self.key.session_id, "filter_key": self.filter_key,
                       "full_history": read.full_history},
            )  # fmt: skip
        return AgentRequest(
            messages=request.messages, tools=request.tools, report=request.report,
            summary=read.summary if request.report.summary_injected else None, budget=assembly.token_budget,
            summary_refreshed=refreshed, cut_tokens=fitted.cut_tokens, projection_lag=read.projection_lag,
            index_lag=read.index_lag, deep_index_lag=read.deep_index_lag, read_truncated=read_truncated,
        )  # fmt: skip

    def _fit(
        self, system_prompt: str, read: ContextRead, tools: Sequence[Mapping[str, Any]], options: AssemblyOptions
    ) -> Fitted:
        return fit(lambda o: assemble_from_read(system_prompt, read, tools=tools, options=o), options)

    async def _read_for(self, assembly: AssemblyOptions) -> ContextRead:
        """The read a request built with ``assembly`` needs: from the summary's boundary when the request
        shows the summary, else the key's whole history (summaries off, or a formatter that renders nothing)."""
        read = await self.read(full_history=not assembly.add_session_summary)
        if needs_full_history(read, assembly):
            read = await self.read(full_history=True)
        return read

    async def read(self, *, full_history: bool = False) -> ContextRead:
        """The key's context read, once Cassandra shows every event (and summary) this facade published.

        ``full_history``: from the session's start, not the summary's boundary (``ContextReader.read``).
        """
        deadline = time.monotonic() + self.options.projection_wait_s
        delay = _FIRST_POLL_S
        current = self._run.user_event_id if self._run is not None else None
        while True:
            try:
                read = await self.backend.context.read(
                    self.key, self.filter_key, current_event_id=current, full_history=full_history
                )
            except AnchorNotFound:  # the run's user message is not projected yet
                read = None
            missing = self._not_shown(read)
            if read is not None and not missing:
                self._unconfirmed.clear()
                self._clock.seen(read.events, read.summary)
                return read
            if time.monotonic() >= deadline:
                lag = read.projection_lag if read is not None else ProjectionLag()
                raise ProjectionBehindError(
                    f"Cassandra does not show {len(missing) or 1} of the events published for {self.key} "
                    f"after {self.options.projection_wait_s:g} s (projector {lag.events_behind} events / "
                    f"{lag.seconds_behind:g} s behind); is the projector running?",
                    lag, missing,
                )  # fmt: skip
            await asyncio.sleep(delay)
            delay = min(delay * 1.5, _MAX_POLL_S)

    def _not_shown(self, read: ContextRead | None) -> list[str]:
        """The ids of published events ``read`` neither holds nor covers by its summary's boundary."""
        if read is None:
            return [event_id for event_id, _, _ in self._unconfirmed]
        ids = {e.event_id for e in read.events}
        missing = [
            event_id for event_id, ts, seq in self._unconfirmed
            if event_id not in ids
            and (read.summary is None or not covers(read.summary.boundary, event_id, ts, seq, read.boundary_seq))
        ]  # fmt: skip
        floor = self._summary_floor
        if floor is not None and read.served_epoch == floor[0] and _own_version(read, self.filter_key) < floor[1]:
            # On another epoch the session switched lines (either way): the read side serves one at once.
            missing.append(f"summary v{floor[1]}" + (f" of epoch {floor[0]}" if floor[0] else ""))
        return missing

    # -- summaries -------------------------------------------------------------------------------------------

    async def summarize(self, *, force: bool = True, timeout: float | None = None) -> SessionSummary | None:
        """Ask for a summary of the key now (``summarize_sync``); the next request waits until it is projected.

        Returns what :meth:`DistillClient.request_summary <streams.client.DistillClient.request_summary>`
        returns (``None``: nothing to summarize) and raises what it raises.
        """
        summary = await self.backend.client.request_summary(
            self.key, self.filter_key, force=force, timeout=timeout or self.options.summary_timeout_s
        )
        if summary is not None:
            floor = self._summary_floor
            if floor is None or floor[0] != summary.epoch or floor[1] < summary.version:
                self._summary_floor = (summary.epoch, summary.version)
        return summary

    def _after_boundary(self, read: ContextRead) -> bool:
        """Whether ``read`` holds events its summary's boundary does not cover (what a forced summary takes)."""
        covered = covered_mask(read.events, read.summary.boundary if read.summary is not None else None)
        return any(not c and self._shows(e) for e, c in zip(read.events, covered, strict=True))

    def _shows(self, event: SessionEvent) -> bool:
        """Whether a request of this facade's key shows ``event`` (not another branch's, not a chunk)."""
        return not event.partial and related(event.filter_key, self.filter_key)

    async def _refresh(self, *, force: bool) -> SessionSummary | None:
        """:meth:`summarize`, a failure logged instead of raised: the request is then built without it."""
        try:
            return await self.summarize(force=force)
        except (SummaryUnavailableError, SummaryTimeoutError) as exc:
            log.warning("summary before the model call not available: %s", exc,
                        extra={"session_id": self.key.session_id, "filter_key": self.filter_key})  # fmt: skip
            return None

    # -- events ----------------------------------------------------------------------------------------------

    def _event(self, msg: Message, run: _Run, *, usage: Any = None, event_id: str | None = None) -> SessionEvent:
        # utf8_record: a text holding a lone surrogate (a name of non-UTF-8 bytes) could not be published
        return utf8_record(SessionEvent(
            app_name=self.key.app_name, user_id=self.key.user_id, session_id=self.key.session_id,
            event_id=event_id or _new_event_id(), timestamp=self._clock.next(datetime.now(UTC)),
            invocation_id=run.invocation_id, request_id=run.request_id,
            author="user" if msg.role == "user" else self.agent_name, filter_key=self.filter_key, message=msg,
            model=self.model, context_window=self.options.context_window, usage=usage,
        ))  # fmt: skip

    async def _publish(self, events: Sequence[SessionEvent], encoded: Sequence[bytes] | None = None) -> None:
        """Publish ``events`` (``encoded``: their values, as ``encoded_within`` made them; ``None``: the client
        encodes them) and note them as not yet shown."""
        offsets = await self.backend.client.publish_logged(events, encoded=encoded)
        self._unconfirmed.extend((e.event_id, e.timestamp, seq) for e, seq in zip(events, offsets, strict=True))

    async def _seed(self) -> None:
        """Read once before the first event: timestamps go after what the session already holds."""
        if not self._seeded:
            await self.read()
            self._seeded = True

    async def _current_run(self) -> _Run:
        """The current run; on a facade that has not started one, the run of the session's latest user turn."""
        if self._run is not None:
            return self._run
        read = await self.read()
        self._seeded = True
        current = next((e for e in read.events if e.event_id == read.current_event_id), None)
        if current is None:
            rid = f"req-{uuid.uuid4().hex[:12]}"
            self._run = _Run(request_id=rid, invocation_id=rid)
        else:
            later = read.events[read.events.index(current) + 1 :]  # log order
            after = [e for e in later if e.message.role == "assistant" and self._shows(e)]
            self._run = _Run(current.request_id, current.invocation_id, current.event_id, model_calls=len(after))
            for event in later:  # a functions-API call the run left unanswered (a restarted runtime answers it)
                if self._shows(event):
                    self._note_legacy(self._run, event)
        return self._run


def _new_event_id() -> str:
    return f"ev-{uuid.uuid4().hex}"


def _own_version(read: ContextRead, filter_key: str) -> int:
    """The version of the key's own summary in ``read`` (0: none; an ancestor's does not count)."""
    s = read.summary
    return s.version if s is not None and s.filter_key == filter_key else 0


def _newer(summary: SessionSummary, read: ContextRead, filter_key: str) -> bool:
    """Whether ``summary`` (an answer of ``summarize_sync``) is news to ``read``: a newer version of the
    key's own summary, or one of another epoch than the read's (versions of two lines do not compare)."""
    return summary.epoch != read.served_epoch or summary.version > _own_version(read, filter_key)
