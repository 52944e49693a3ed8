"""The summarizer: previous summary + delta events + trigger -> the next summary.

One call runs as many passes as needed to cover the selected delta (each
pass covers a complete prefix and rolls its summary into the next), up to
``max_passes``. It stores nothing: on any failure or cancellation the caller
keeps its boundary, and a result exists only when every step succeeded.

The invariant kept here: every event a result's boundary covers was in the
input of one of its passes (directly, or inside the previous summary that
pass rolled forward). So the input is shrunk only for a context-length
refusal (one standalone retry at half the budget); an empty answer, or one
the provider cut off (``finish_reason`` ``length``/``content_filter``), is
asked again with the same request and then fails, never cut nor stored; a forked caller
request is used only when it holds every event of the pass (payloads whole); a
pre-summary hook that leaves no text summarizes nothing; and an answer over
``max_summary_length`` (a limit every request states) is sent back once to be
shortened by the model, a cut that still happens reported (``length_cut``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Protocol

from schemas import (
    CallReport,
    LengthCut,
    PayloadCut,
    SessionEvent,
    SessionKey,
    SummaryBoundary,
    SummaryReport,
    SummaryStats,
    TriggerReport,
)
from streams.errors import DistillError, PermanentError, RetryableError
from streams.rules.boundaries import BOUNDARY_FORMAT_VERSION
from streams.rules.tokens import TokenCounter, get_token_counter
from streams.summarizer.budget import halve, input_budget, resolve_context_window
from streams.summarizer.conversation import DEFAULT_FORMATTER, ConversationFormatter
from streams.summarizer.event_json import event_json
from streams.summarizer.fork import fork_for_pass
from streams.summarizer.hooks import (
    AfterModelArgs,
    BeforeModelArgs,
    PostSummaryContext,
    PreSummaryContext,
    SummaryHooks,
    resolve,
    run_after_model,
    run_before_model,
)
from streams.summarizer.length import cap_length
from streams.summarizer.model import ContextLengthError, ModelResponse, SummaryModel
from streams.summarizer.plan import (
    PassPlan,
    RequestBuilder,
    SourceTooLargeError,
    covered_prefix,
    first_request,
    plan_pass,
)
from streams.summarizer.prompts import PromptSet, build_prompts
from streams.summarizer.report import MANUAL_TRIGGER, attach_report, compression_stats, emit_report
from streams.summarizer.request import ChatRequest, SummarySource, count_request, standalone_request
from streams.summarizer.selection import SkipRecent, select_events

log = logging.getLogger(__name__)


class SummarySkipped(DistillError):
    """There is nothing to summarize (or no summarizer applies): no summary, no retry."""


EMPTY_ANSWER = "empty answer"
"""The ``error`` of a :class:`CallReport` whose model answered no text."""

CUT_OFF_ANSWER = "answer cut off"
"""How the ``error`` of a :class:`CallReport` whose answer the provider cut off begins (the finish reason follows)."""


class EmptySummaryError(RetryableError):
    """The model answered no text, also when asked again with the same request.

    Retryable: an empty answer says nothing about the request's size (it is
    never answered by cutting the input), and is usually a provider fault
    that passes; the job's failure policy retries it with backoff within its
    timeout and then publishes the failure. The boundary does not move.
    """


class CutOffSummaryError(RetryableError):
    """The provider cut the model's answer off, also when asked again with the same request.

    Its ``finish_reason`` was ``length`` (the output limit) or ``content_filter``: the
    text stops mid-way, and stored it would replace the previous summary — the only
    copy of the history before the boundary — with part of one. Retryable like an
    empty answer (the same request may be answered in full); the boundary does not move.
    """


@dataclass(frozen=True)
class SummaryResult:
    """A produced summary and the boundary it reaches.

    ``last_event`` is the last delta event the summary covers (``None`` when
    a forced pass only rewrote the previous summary: the boundary stays).
    ``remaining_events`` selected events are left for a later summary when
    ``max_passes`` ran out (``caught_up`` is then false).
    """

    text: str
    last_event: SessionEvent | None
    covered_events: int
    remaining_events: int
    held_back_events: int
    passes: int
    model: str
    prompt_version: str
    fork_used: bool
    stats: SummaryStats
    report: SummaryReport

    @property
    def caught_up(self) -> bool:
        return self.remaining_events == 0

    def boundary(self, version: int | None = None, previous: SummaryBoundary | None = None) -> SummaryBoundary:
        """The new boundary (``previous``'s position when no event was covered).

        ``SummaryBoundary.version`` is the boundary *format* version
        (:data:`~streams.rules.boundaries.BOUNDARY_FORMAT_VERSION`), so ``version``
        — the new summary's version, which goes on ``SessionSummary.version`` —
        is accepted for compatibility and not stored in the boundary.
        """
        if self.last_event is None:
            if previous is None:
                raise PermanentError("a summary that covers no event needs the previous boundary")
            return previous.model_copy(update={"version": BOUNDARY_FORMAT_VERSION})
        return SummaryBoundary(
            cutoff_at=self.last_event.timestamp, last_event_id=self.last_event.event_id, version=BOUNDARY_FORMAT_VERSION
        )


class SummarizerLike(Protocol):
    """What the summarize agent calls: a :class:`Summarizer` or a dynamic one."""

    async def summarize(
        self,
        previous_summary: str,
        events: Sequence[SessionEvent],
        trigger: TriggerReport | None = None,
        *,
        session: SessionKey | None = None,
        filter_key: str = "",
        model_request: Mapping[str, Any] | None = None,
        force: bool = False,
        context: Mapping[str, Any] | None = None,
        context_window: int | None = None,
    ) -> SummaryResult: ...

    def metadata(self) -> dict[str, Any]: ...


@dataclass
class _Attempt:
    """Mutable bookkeeping of one ``summarize`` call."""

    trigger: TriggerReport
    context_window: int | None = None
    """This call's window override (a window learned from a context-length refusal)."""
    calls: list[CallReport] = field(default_factory=list)
    passes: int = 0
    truncated: bool = False
    partial: bool = False
    fork_used: bool = False
    cuts: list[PayloadCut] = field(default_factory=list)
    length_cut: LengthCut | None = None

    def report(self) -> SummaryReport:
        return SummaryReport(
            trigger=self.trigger,
            calls=tuple(self.calls),
            passes=max(self.passes, 1),
            truncated_previous_summary=self.truncated,
            partial_prefix=self.partial,
            truncated_payloads=tuple(self.cuts),
            length_cut=self.length_cut,
        )


class Summarizer:
    """Builds summary requests, calls its model, and rolls summaries forward.

    ``context_window`` overrides the model's window (settings'
    ``DISTILL_LLM__CONTEXT_WINDOW``); ``token_counter`` defaults to the
    process-wide counter at call time. An empty answer (or one the provider
    cut off) is asked again ``empty_answer_retries`` times with the same
    request, then fails with :class:`EmptySummaryError`
    (:class:`CutOffSummaryError`). Prompts are validated here, so a bad
    prompt fails at configuration with the rule it breaks; a word limit that
    no prompt states is only logged (see :meth:`PromptSet.validate`).
    """

    def __init__(
        self,
        model: SummaryModel,
        *,
        prompt: str | None = None,
        system_prompt: str | None = None,
        fork_prompt: str | None = None,
        max_summary_words: int | None = None,
        max_summary_length: int | None = None,
        formatter: ConversationFormatter = DEFAULT_FORMATTER,
        skip_recent: SkipRecent | None = None,
        hooks: SummaryHooks | None = None,
        cache_safe_forking: bool = True,
        context_window: int | None = None,
        token_counter: TokenCounter | None = None,
        max_passes: int = 8,
        empty_answer_retries: int = 1,
        name: str = "default",
    ) -> None:
        if max_passes < 1:
            raise ValueError("max_passes must be >= 1")
        if empty_answer_retries < 0:
            raise ValueError("empty_answer_retries must be >= 0")
        self.empty_answer_retries = empty_answer_retries
        self.model = model
        self.prompts: PromptSet = build_prompts(
            prompt, system_prompt, fork_prompt, max_summary_words, max_summary_length
        )
        self.max_summary_length = max_summary_length or None
        self.formatter = formatter
        self.skip_recent = skip_recent
        self.hooks = hooks or SummaryHooks()
        self.cache_safe_forking = cache_safe_forking
        self.context_window = context_window
        self.token_counter = token_counter
        self.max_passes = max_passes
        self.name = name

    def set_prompt(self, prompt: str) -> None:
        """Replace the user prompt (``""`` is ignored); an invalid prompt raises ``PromptError``."""
        self.prompts = self.prompts.with_changes(prompt=prompt)

    def set_system_prompt(self, system_prompt: str) -> None:
        """Replace the system prompt (``""`` is ignored); an invalid one raises ``PromptError``
        (a word limit left unstated is only logged)."""
        self.prompts = self.prompts.with_changes(system_prompt=system_prompt)

    def set_model(self, model: SummaryModel | None) -> None:
        """Use another model from now on (``None`` is ignored)."""
        if model is not None:
            self.model = model

    def counter(self) -> TokenCounter:
        return self.token_counter or get_token_counter()

    def input_budget(self, context_window: int | None = None) -> int:
        """Tokens a summary request may use: ``min(provider budget, 70 % of the window)``.

        ``context_window`` (a window a provider named when it refused a request) caps the window.
        """
        window = resolve_context_window(self.context_window, self.model.name, self.model.context_window)
        if context_window is not None and context_window > 0:
            window = min(window, context_window)
        return input_budget(window, self.model.provider_budget)

    def metadata(self) -> dict[str, Any]:
        """The configuration, for logs and ``distill demo``."""
        return {
            "summarizer_name": self.name,
            "model_name": self.model.name,
            "model_available": True,
            "max_summary_words": self.prompts.max_summary_words or 0,
            "max_summary_length": self.max_summary_length or 0,
            "skip_recent_enabled": self.skip_recent is not None,
            "cache_safe_forking": self.cache_safe_forking,
            "prompt_version": self.prompts.version,
            "input_budget": self.input_budget(),
            "token_counter": self.counter().name,
        }

    async def summarize(
        self,
        previous_summary: str,
        events: Sequence[SessionEvent],
        trigger: TriggerReport | None = None,
        *,
        session: SessionKey | None = None,
        filter_key: str = "",
        model_request: Mapping[str, Any] | None = None,
        force: bool = False,
        context: Mapping[str, Any] | None = None,
        context_window: int | None = None,
    ) -> SummaryResult:
        """Summarize ``events`` (the delta after the boundary, in order) on top of ``previous_summary``.

        ``context_window`` caps the model's window for this call (see :meth:`input_budget`).

        Raises :class:`SummarySkipped` when nothing is left to summarize,
        :class:`~streams.errors.RetryableError` for transient model failures
        and :class:`~streams.errors.PermanentError` otherwise. The report
        hook sees every attempt, failed ones included, and the error carries it (``report_of``).
        """
        attempt = _Attempt(trigger or MANUAL_TRIGGER, context_window)
        try:
            result = await self._summarize(
                previous_summary,
                events,
                attempt,
                session,
                filter_key,
                model_request,
                force,
                dict(context or {}),
            )
        except BaseException as exc:
            attach_report(exc, attempt.report())
            await emit_report(self.hooks.report, attempt.report(), exc)
            raise
        await emit_report(self.hooks.report, result.report, None)
        return result

    def cache_key(
        self,
        previous_summary: str,
        events: Sequence[SessionEvent],
        *,
        filter_key: str = "",
        model_request: Mapping[str, Any] | None = None,
        force: bool = False,
        context_window: int | None = None,
    ) -> str | None:
        """The content address of what :meth:`summarize` would send for these inputs.

        A SHA-256 over the first request this call would send (its messages,
        tools and parameters, as built: prompts, the previous summary, the
        selected events as formatted, the budget's cuts), every event selected
        for the call (later passes read them), the model, and what shapes the
        answer after the model (``max_summary_length``, ``max_passes``, the hooks
        installed). Settings reach it through what they select or build —
        ``keep_recent_rounds``/``skip_recent_events`` through the selection, a
        prompt through the request — not through a list kept by hand.
        ``None`` when the call would summarize nothing. Pure: no model call, no hook run.
        """
        previous = previous_summary.strip()
        selected, _ = select_events(
            events, self.skip_recent, has_previous_summary=bool(previous), formatter=self.formatter
        )
        rewrite_only = force and bool(previous) and self.prompts.separate_previous_summary
        if not selected and not rewrite_only:
            return None
        try:
            request = self._first_request(previous, selected, context_window, model_request)
        except DistillError:
            return None  # the call itself will fail the same way: nothing to address
        hooks = self.hooks
        head = {
            "model": self.model.name,
            "request": {"messages": request.messages, "tools": request.tools, "params": request.params},
            "max_summary_length": self.max_summary_length,
            "max_passes": self.max_passes,
            "force": force,
            "filter_key": filter_key,
            "hooks": [
                _callable_name(h)
                for h in (hooks.pre_summary, hooks.post_summary, hooks.before_model, hooks.after_model)
            ],
        }
        digest = hashlib.sha256(_KEY_JSON(head).encode())
        update = digest.update
        for event in selected:
            raw = event_json(event)  # serialized once per event object (an event of several jobs)
            update(len(raw).to_bytes(8, "big"))
            update(raw)
        return digest.hexdigest()

    def _first_request(
        self,
        previous: str,
        events: list[SessionEvent],
        context_window: int | None,
        model_request: Mapping[str, Any] | None,
    ) -> ChatRequest:
        """The request the first pass sends before any hook (the fork, or the planned standalone one)."""
        budget = self.input_budget(context_window)
        fork_parent = model_request if self.cache_safe_forking else None
        builder = RequestBuilder(self.prompts, self.counter(), fork_fallback=fork_parent is not None)
        if fork_parent is not None:
            forked, _ = fork_for_pass(
                fork_parent, self.prompts.render_fork(), events, previous, budget, self.counter(), self.formatter
            )
            if forked is not None:
                return forked
        return first_request(events, previous, budget, builder, self.formatter)

    async def _summarize(
        self,
        previous: str,
        events: Sequence[SessionEvent],
        attempt: _Attempt,
        session: SessionKey | None,
        filter_key: str,
        model_request: Mapping[str, Any] | None,
        force: bool,
        context: dict[str, Any],
    ) -> SummaryResult:
        counter = self.counter()
        sid = session.session_id if session else "?"
        previous = previous.strip()
        selected, held_back = select_events(
            events, self.skip_recent, has_previous_summary=bool(previous), formatter=self.formatter
        )
        rewrite_only = force and bool(previous) and self.prompts.separate_previous_summary
        if not selected and not rewrite_only:
            raise SummarySkipped(f"no events to summarize for session {sid} (events={len(events)})")
        if not self.formatter.conversation_text(selected) and not rewrite_only:
            raise SummarySkipped(f"no conversation text extracted for session {sid} (events={len(selected)})")

        summary, remaining, covered = previous, list(selected), 0
        last_event: SessionEvent | None = None
        # The caller's request shows the delta's skip_summarization events (they are visible while after
        # the boundary); forking it would put them in the summary input, so such a delta is sent standalone.
        may_fork = self.cache_safe_forking and not any(e.skip_summarization for e in events)
        while True:
            attempt.passes += 1
            fork_parent = model_request if attempt.passes == 1 and may_fork else None
            text, pass_events = await self._pass(summary, remaining, attempt, session, filter_key, fork_parent, context)
            summary = text
            covered += len(pass_events)
            if pass_events:
                last_event = pass_events[-1]
            remaining = remaining[len(pass_events) :]
            if not remaining or attempt.passes >= self.max_passes:
                break

        summary = await self._fit_length(summary, attempt, session, filter_key, context)
        summary = await self._post_hook(summary, last_event, session, filter_key, context)
        original_tokens = sum(counter.count_message(e.message) for e in selected[:covered])
        original_tokens += counter.count_text(previous)
        report = attempt.report()
        stats = compression_stats(
            covered_events=covered,
            kept_recent_events=held_back + len(remaining),
            had_previous_summary=bool(previous),
            original_tokens=original_tokens,
            summary_tokens=counter.count_text(summary),
            calls=report.calls,
        )
        return SummaryResult(
            text=summary,
            last_event=last_event,
            covered_events=covered,
            remaining_events=len(remaining),
            held_back_events=held_back,
            passes=attempt.passes,
            model=self.model.name,
            prompt_version=self.prompts.version,
            fork_used=attempt.fork_used,
            stats=stats,
            report=report,
        )

    async def _pass(
        self,
        previous: str,
        events: list[SessionEvent],
        attempt: _Attempt,
        session: SessionKey | None,
        filter_key: str,
        fork_parent: Mapping[str, Any] | None,
        context: dict[str, Any],
    ) -> tuple[str, list[SessionEvent]]:
        """One request covering a prefix of ``events``.

        An empty or cut-off answer is asked again with the same request at
        the same budget (``empty_answer_retries`` times), then fails with
        :class:`EmptySummaryError` or :class:`CutOffSummaryError`. Only a context-length refusal retries
        once, as a standalone request at half the budget.
        """
        budget = self.input_budget(attempt.context_window)
        builder = RequestBuilder(self.prompts, self.counter(), fork_fallback=fork_parent is not None)
        forked, declined = None, None
        if fork_parent is not None:
            forked, declined = fork_for_pass(
                fork_parent, self.prompts.render_fork(), events, previous, budget, self.counter(), self.formatter
            )
        if forked is not None:
            # The caller's request already holds the conversation: hook edits cannot reach it.
            text = self.formatter.conversation_text(events)
            # A model that reads the source (the extractive one) would otherwise rebuild it from the
            # fork's messages, where the previous summary sits in a system message it skips.
            forked.source = SummarySource(
                text, previous, self.prompts.max_summary_words, self.prompts.max_summary_length
            )
            plan = PassPlan(list(events), text, forked, False, False)
            _, hooked = await self._pre_hook(plan, previous, budget, builder, session, filter_key, context, apply=False)
            request, mode = forked, "cache_safe_fork"
        else:
            plan = plan_pass(events, previous, budget, builder, self.formatter)
            plan, hooked = await self._pre_hook(plan, previous, budget, builder, session, filter_key, context)
            request, mode = plan.request, "standalone"
        try:
            text = await self._answer(
                request, mode, budget, attempt, context, plan, previous, retry_follows=True, fork_declined=declined
            )
        except ContextLengthError:
            retry_budget = halve(budget)
            if hooked is not None:
                plan = self._fit_hooked(plan, hooked, retry_budget, builder)
            else:
                plan = plan_pass(events, previous, retry_budget, builder, self.formatter)
            mode = "standalone"
            text = await self._answer(
                plan.request, mode, retry_budget, attempt, context, plan, previous, fork_declined=declined
            )
        self._note_plan(attempt, plan, mode)
        return text, plan.events

    @staticmethod
    def _note_plan(attempt: _Attempt, plan: PassPlan, mode: str) -> None:
        attempt.truncated = attempt.truncated or (plan.truncated_previous and mode != "cache_safe_fork")
        attempt.partial = attempt.partial or plan.partial_prefix
        attempt.fork_used = attempt.fork_used or mode == "cache_safe_fork"
        if mode != "cache_safe_fork":
            attempt.cuts.extend(plan.cuts)

    async def _answer(
        self,
        request: ChatRequest,
        mode: str,
        budget: int,
        attempt: _Attempt,
        context: dict[str, Any],
        plan: PassPlan,
        previous: str,
        *,
        retry_follows: bool = False,
        fork_declined: str | None = None,
    ) -> str:
        """The usable answer to ``request``: the first call plus the same-budget retries of an empty or cut-off one.

        ``retry_follows``: a context-length refusal will be retried by the
        caller (reported ``retried``, else ``failed``); it is re-raised either way.
        """
        tries = 1 + self.empty_answer_retries
        failure: str | None = None
        for n in range(1, tries + 1):
            text, failure = await self._call(
                request.clone(),
                mode,
                budget,
                attempt,
                context,
                retry_follows,
                last=n == tries,
                fork_declined=fork_declined,
            )
            if failure is None:
                return text
        chars = len(plan.text.encode()) + len(previous.encode())
        if failure != EMPTY_ANSWER:
            raise CutOffSummaryError(
                f"summary answer cut off by the provider (input_chars={chars}): {tries} unusable answer(s) "
                f"at budget {budget}, the last {failure} (a larger max_output_tokens may help)"
            )
        raise EmptySummaryError(
            f"generated empty summary (input_chars={chars}): {tries} empty answer(s) at budget {budget}"
        )

    async def _call(
        self,
        request: ChatRequest,
        mode: str,
        budget: int,
        attempt: _Attempt,
        context: dict[str, Any],
        context_retry_follows: bool,
        *,
        last: bool,
        fork_declined: str | None = None,
    ) -> tuple[str, str | None]:
        """Callbacks, one model call, its report; the stripped answer and why it is unusable (``None``: usable).

        An empty answer is reported ``retried`` (``failed`` when ``last``)
        with the error ``empty answer``; one the provider cut off the same
        way, with ``answer cut off (finish_reason=…)``, and its text is never returned.
        """
        model = self.model.name
        custom = await run_before_model(self.hooks.before_model, BeforeModelArgs(request, model, context))
        if custom is not None:
            text = custom.custom_response.strip()
            failure = None if text else EMPTY_ANSWER
            outcome = "ok" if failure is None else ("failed" if last else "retried")
            attempt.calls.append(
                CallReport(
                    mode="custom_response",
                    model=model,
                    budget_tokens=budget,
                    outcome=outcome,
                    error=failure,
                    fork_declined=fork_declined,
                )
            )
            return text, failure
        estimated = count_request(request, self.counter())
        if estimated > budget:
            raise PermanentError(
                f"summary request no longer fits after before-model callbacks: "
                f"{estimated} tokens, input budget {budget}"
            )
        call = CallReport(
            mode=mode,
            model=model,
            estimated_prompt_tokens=estimated,
            budget_tokens=budget,
            fork_declined=fork_declined,
        )
        started = time.monotonic()
        try:
            response = await self.model.complete(request)
        except ContextLengthError as exc:
            attempt.calls.append(_finished(call, started, None, "retried" if context_retry_follows else "failed", exc))
            raise
        except BaseException as exc:
            attempt.calls.append(_finished(call, started, None, "failed", exc))
            raise
        response = await run_after_model(self.hooks.after_model, AfterModelArgs(request, response, context))
        text = response.text.strip()
        failure = _unusable(response, text)
        outcome = "ok" if failure is None else ("failed" if last else "retried")
        attempt.calls.append(_finished(call, started, response, outcome, None, failure))
        return ("", failure) if failure else (text, None)

    async def _pre_hook(
        self,
        plan: PassPlan,
        previous: str,
        budget: int,
        builder: RequestBuilder,
        session: SessionKey | None,
        filter_key: str,
        context: dict[str, Any],
        *,
        apply: bool = True,
    ) -> tuple[PassPlan, _Hooked | None]:
        """Let the pre-summary hook edit the pass input, then re-bound the request.

        With ``apply=False`` (a forked request) the hook's edits cannot reach
        the request; they are kept (when there are any) for a standalone
        retry. A hook that leaves no conversation text (every event removed,
        or the text emptied) raises :class:`SummarySkipped`: nothing is
        summarized and no boundary moves.
        """
        hook = self.hooks.pre_summary
        if hook is None:
            return plan, None
        ctx = PreSummaryContext(session, filter_key, list(plan.events), plan.text, previous, context)
        try:
            await resolve(hook(ctx))
        except Exception as exc:
            if self.hooks.abort_on_error:
                raise PermanentError(f"pre-summary hook failed: {exc}") from exc
            return plan, None
        if ctx.text != plan.text:
            text = ctx.text
        elif ctx.events != plan.events:
            text = self.formatter.conversation_text(ctx.events)
        else:
            text = plan.text
        edited_previous = ctx.previous_summary.strip()
        if not text.strip() and (plan.events or not edited_previous):
            sid = session.session_id if session else "?"
            raise SummarySkipped(
                f"no conversation text extracted for session {sid} (events={len(plan.events)}): "
                f"the pre-summary hook left nothing to summarize"
            )
        # Text left as it was, or only added to: the (possibly edited) events are planned
        # again, payload cuts included; only a rewritten text is bounded as it stands.
        if ctx.text == plan.text:
            hooked = _Hooked(text, edited_previous, list(ctx.events))
        elif plan.text and plan.text in ctx.text:
            before, _, after = ctx.text.partition(plan.text)
            hooked = _Hooked(ctx.text, edited_previous, list(plan.events), (before, after))
        else:
            hooked = _Hooked(ctx.text, edited_previous)
        if not apply:
            edited = text != plan.text or edited_previous != previous
            return plan, hooked if edited else None
        return self._fit_hooked(plan, hooked, budget, builder), hooked

    def _fit_hooked(self, plan: PassPlan, hooked: _Hooked, budget: int, builder: RequestBuilder) -> PassPlan:
        """The pass's request for the hook's input within ``budget``.

        Hooked events are planned again like the delta: a complete prefix of
        them when they do not all fit (the pass then covers ``plan.events`` up to
        that prefix's last event), so the previous summary is cut only when it
        alone does not fit beside the smallest prefix. Only when no prefix maps
        back onto ``plan.events`` (the hook added or reordered events) are they
        all sent. A rewritten text is bounded as it stands and covers ``plan.events``.
        """
        try:
            if hooked.events is not None:
                refit = plan_pass(hooked.events, hooked.previous, budget, builder, self.formatter, wrap=hooked.wrap)
                covered = covered_prefix(refit.events, hooked.events, plan.events)
                if covered is not None and len(covered) < len(plan.events):
                    return replace(refit, events=covered, partial_prefix=True)
                if covered is None:
                    refit = plan_pass(
                        hooked.events,
                        hooked.previous,
                        budget,
                        builder,
                        self.formatter,
                        whole_delta=True,
                        wrap=hooked.wrap,
                    )
                return replace(refit, events=plan.events, partial_prefix=plan.partial_prefix)
            request, truncated = builder.bounded(hooked.text, hooked.previous, budget)
        except SourceTooLargeError as exc:
            raise PermanentError(f"after the pre-summary hook: {exc}") from exc
        cuts = tuple(c for c in plan.cuts if f'session_load(event_id="{c.event_id}")' in hooked.text)
        return replace(plan, text=hooked.text, request=request, truncated_previous=truncated, cuts=cuts)

    async def _fit_length(
        self,
        summary: str,
        attempt: _Attempt,
        session: SessionKey | None,
        filter_key: str,
        context: dict[str, Any],
    ) -> str:
        """``summary`` within ``max_summary_length``, the model asked once to shorten it before any cut.

        The limit is stated in every request (:meth:`PromptSet.length_note`), so an
        answer over it is rare. Such an answer is sent back once (a ``shorten`` call,
        :data:`~streams.summarizer.prompts.SHORTEN_PROMPT`): the model, not a cut, decides
        what to condense. Only when the rewrite is still over the limit, or none is usable
        (:meth:`_shorten`), is the shorter of the two cut (:func:`cap_length`), and the cut is reported
        (``SummaryReport.length_cut``, an INFO line without content): the cut part is in
        no record, since the cut text rolls forward as the previous summary.
        """
        limit = self.max_summary_length
        if not limit or len(summary) <= limit:
            return summary
        rewrite = await self._shorten(summary, attempt, context)
        if rewrite is not None and len(rewrite) <= limit:
            return rewrite
        shorter = summary if rewrite is None or len(rewrite) >= len(summary) else rewrite
        kept = cap_length(shorter, limit)
        attempt.length_cut = LengthCut(
            max_chars=limit,
            answer_chars=len(summary),
            rewrite_chars=len(rewrite) if rewrite is not None else None,
            kept_chars=len(kept),
        )
        log.info(
            "summary cut to max_summary_length",
            extra={
                "session_id": session.session_id if session else None,
                "filter_key": filter_key,
                "max_summary_length": limit,
                "answer_chars": len(summary),
                "rewrite_chars": len(rewrite) if rewrite is not None else None,
                "kept_chars": len(kept),
            },
        )
        return kept

    async def _shorten(self, summary: str, attempt: _Attempt, context: dict[str, Any]) -> str | None:
        """The model's shorter rewrite of ``summary``; ``None`` when there is none to use.

        A transient failure (:class:`~streams.errors.RetryableError`: 429, 5xx, timeouts) fails
        the job like one of the summary call, so it is retried rather than cut. An empty or
        cut-off answer is asked again like the summary's (``empty_answer_retries``); that, a
        refusal (a permanent error, the request too large for the budget) gives ``None``: the
        cut that follows is reported.
        """
        budget = self.input_budget(attempt.context_window)
        request = standalone_request(
            self.prompts.render_shorten(summary),
            self.prompts.render_system(),
            source=SummarySource("", summary, self.prompts.max_summary_words, self.prompts.max_summary_length),
        )
        if count_request(request, self.counter()) > budget:
            return None
        tries = 1 + self.empty_answer_retries
        for n in range(1, tries + 1):
            try:
                text, failure = await self._call(
                    request.clone(), "shorten", budget, attempt, context, False, last=n == tries
                )
            except RetryableError:
                raise  # transient: the job is retried (its policy and backoff), nothing is cut or stored
            except DistillError:
                return None  # refused for good (reported on the call): the reported cut follows
            if failure is None:
                return text
        return None

    async def _post_hook(
        self,
        summary: str,
        last_event: SessionEvent | None,
        session: SessionKey | None,
        filter_key: str,
        context: dict[str, Any],
    ) -> str:
        hook = self.hooks.post_summary
        if hook is None:
            return summary
        ctx = PostSummaryContext(
            session,
            filter_key,
            summary,
            last_event.event_id if last_event else "",
            last_event.timestamp if last_event else datetime.min,
            context,
        )
        try:
            await resolve(hook(ctx))
        except Exception as exc:
            if self.hooks.abort_on_error:
                raise PermanentError(f"post-summary hook failed: {exc}") from exc
            return summary
        return ctx.summary.strip() or summary


@dataclass(frozen=True)
class _Hooked:
    text: str
    previous: str
    events: list[SessionEvent] | None = None
    """Set unless the hook rewrote the text: the input is these events, planned again at each budget."""
    wrap: tuple[str, str] = ("", "")
    """What the hook added before and after the conversation text."""


_KEY_JSON = json.JSONEncoder(sort_keys=True, ensure_ascii=False, default=str).encode
"""``json.dumps(head, sort_keys=True, ensure_ascii=False, default=str)`` (the same text) without building
an encoder per call: the head of every cache key, per job."""


def _callable_name(hook: object) -> str | None:
    if not hook:
        return None
    if isinstance(hook, list | tuple):
        return ",".join(str(_callable_name(h)) for h in hook)
    return f"{getattr(hook, '__module__', '?')}.{getattr(hook, '__qualname__', type(hook).__qualname__)}"


def _unusable(response: ModelResponse, text: str) -> str | None:
    """Why an answer cannot be the summary (``None``: it can)."""
    if response.cut_off:
        return f"{CUT_OFF_ANSWER} (finish_reason={response.finish_reason})"
    return None if text else EMPTY_ANSWER


def _finished(
    call: CallReport,
    started: float,
    response: ModelResponse | None,
    outcome: str,
    error: BaseException | None,
    note: str | None = None,
) -> CallReport:
    usage = response.usage if response is not None else None
    return call.model_copy(
        update={
            "latency_ms": round((time.monotonic() - started) * 1000, 3),
            "provider_prompt_tokens": usage.prompt_tokens if usage else None,
            "provider_cached_tokens": usage.cached_tokens if usage else None,
            "completion_tokens": usage.completion_tokens if usage else None,
            "outcome": outcome,
            "error": f"{type(error).__name__}: {error}" if error is not None else note,
        }
    )
