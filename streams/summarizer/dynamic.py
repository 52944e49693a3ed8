"""Per-tenant summarizers chosen at call time by a resolver.

The resolver sees the caller's context (job, app settings, anything the
worker puts there) and the session, and returns the summarizer to use, or
``None``: automatic summaries are then skipped, and a forced one fails.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from schemas import SessionEvent, SessionKey, TriggerReport
from streams.errors import ConfigurationError, PermanentError
from streams.summarizer.hooks import MaybeAwaitable, resolve
from streams.summarizer.summarizer import SummarizerLike, SummaryResult, SummarySkipped

Resolver = Callable[[Mapping[str, Any], SessionKey | None], MaybeAwaitable[SummarizerLike | None]]


class DynamicSummarizer:
    """A summarizer that delegates every call to what ``resolver`` picks."""

    def __init__(self, resolver: Resolver) -> None:
        self.resolver = resolver

    async def resolve(self, context: Mapping[str, Any] | None, session: SessionKey | None) -> SummarizerLike | None:
        """The summarizer for this call, or ``None``."""
        target: SummarizerLike | None = await resolve(self.resolver(context or {}, session))
        if target is self:
            raise ConfigurationError("a dynamic summarizer's resolver returned the dynamic summarizer itself")
        return target

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
        """Delegate; ``None`` from the resolver skips (or, when forced, fails)."""
        target = await self.resolve(context, session)
        sid = session.session_id if session else "?"
        if target is None:
            if force:
                raise PermanentError(f"no dynamic summarizer resolved for session {sid}; cannot force a summary")
            raise SummarySkipped(f"no dynamic summarizer resolved for session {sid}")
        return await target.summarize(
            previous_summary,
            events,
            trigger,
            session=session,
            filter_key=filter_key,
            model_request=model_request,
            force=force,
            context=context,
            **({"context_window": context_window} if context_window is not None else {}),
        )

    def set_prompt(self, prompt: str) -> None:
        """No effect: prompts belong to the resolved summarizers."""

    def set_model(self, model: object) -> None:
        """No effect: models belong to the resolved summarizers."""

    def metadata(self) -> dict[str, Any]:
        return {"type": "dynamic"}
