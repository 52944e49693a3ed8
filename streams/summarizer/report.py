"""Reports of a summary (why it fired, what each call cost) and compression stats."""

from __future__ import annotations

import contextlib
import logging

from schemas import CallReport, SummaryReport, SummaryStats, TriggerReport
from streams.summarizer.hooks import ReportHook, resolve

log = logging.getLogger(__name__)

MANUAL_TRIGGER = TriggerReport(name="manual")


def percent_saved(original: int, compressed: int) -> float:
    """``(original - compressed) / original`` in percent, as the Python guide shows it; 0 when empty."""
    if original <= 0:
        return 0.0
    return round((original - compressed) * 100.0 / original, 2)


def compression_stats(
    *,
    covered_events: int,
    kept_recent_events: int,
    had_previous_summary: bool,
    original_tokens: int,
    summary_tokens: int,
    calls: tuple[CallReport, ...],
) -> SummaryStats:
    """The Python guide's event counts (the summary replaces what it covers) and the same in tokens.

    The original side counts the covered events, the recent events held
    back and the previous summary; the compressed side is the new summary
    plus the events held back.
    """
    original = covered_events + kept_recent_events + (1 if had_previous_summary else 0)
    compressed = 1 + kept_recent_events
    return SummaryStats(
        original_event_count=original,
        compressed_event_count=compressed,
        compression_ratio=percent_saved(original, compressed),
        original_tokens=original_tokens,
        summary_tokens=summary_tokens,
        token_compression_ratio=percent_saved(original_tokens, summary_tokens),
        input_tokens=sum(_input_tokens(c) for c in calls),
        output_tokens=_output_tokens(calls, summary_tokens),
    )


def _output_tokens(calls: tuple[CallReport, ...], summary_tokens: int) -> int:
    reported = [c.completion_tokens for c in calls if c.completion_tokens is not None]
    return sum(reported) if reported else summary_tokens


def _input_tokens(call: CallReport) -> int:
    if call.provider_prompt_tokens is not None:
        return call.provider_prompt_tokens
    return call.estimated_prompt_tokens


async def emit_report(hook: ReportHook | None, report: SummaryReport, error: BaseException | None) -> None:
    """Hand ``report`` to the hook; a failing hook is logged, never raised."""
    if hook is None:
        return
    try:
        await resolve(hook(report, error))
    except Exception:
        log.exception("summary report hook failed")


_REPORT_ATTR = "summary_report"


def attach_report(exc: BaseException, report: SummaryReport) -> None:
    """Keep the report of a failed ``summarize`` on its error (the failure record carries it)."""
    with contextlib.suppress(AttributeError):  # a type with slots: the report hook still saw it
        setattr(exc, _REPORT_ATTR, report)


def report_of(exc: BaseException | None) -> SummaryReport | None:
    """The report :func:`attach_report` kept on ``exc`` or on an error it was raised from."""
    seen = 0
    while exc is not None and seen < 8:
        found = getattr(exc, _REPORT_ATTR, None)
        if isinstance(found, SummaryReport):
            return found
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None
