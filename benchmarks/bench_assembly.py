"""Assembly time and prompt tokens saved, for sessions of 16 / 256 / 1024 events.

Each request in the session is four events: a user message, an assistant tool
call, a 4 KB tool result and an assistant answer; the current request is a new
user message. "saved" is measured against sending the full history unchanged
(no summary, no compaction). Compaction uses keep_recent_requests=1 and
tool_result_max_tokens=256, the shape the Go benchmark uses.

Run: ``.venv/bin/python -m benchmarks.bench_assembly``
"""

from __future__ import annotations

import statistics
import time
from datetime import UTC, datetime, timedelta

from schemas import SessionEvent, SessionSummary, SummaryBoundary, SummaryReport, TriggerReport
from streams.context import AssemblyOptions, CompactionConfig, assemble
from streams.rules.tokens import SimpleTokenCounter

T0 = datetime(2026, 1, 1, tzinfo=UTC)
RESULT = ("lorem ipsum dolor sit amet " * 160)[:4096]
COUNTER = SimpleTokenCounter()


def build_session(n_events: int) -> list[SessionEvent]:
    events: list[SessionEvent] = []
    for i in range(n_events):
        r, step = divmod(i, 4)
        message: dict[str, object]
        if step == 0:
            message = {"role": "user", "content": f"question {r}: what does file {r} contain?"}
        elif step == 1:
            call = {"id": f"c{r}", "type": "function", "function": {"name": "read_file", "arguments": '{"n": 1}'}}
            message = {"role": "assistant", "tool_calls": [call]}
        elif step == 2:
            message = {"role": "tool", "tool_call_id": f"c{r}", "name": "read_file", "content": RESULT}
        else:
            message = {"role": "assistant", "content": f"file {r} holds the usual text."}
        events.append(
            SessionEvent(
                app_name="bench",
                user_id="u",
                session_id="s",
                event_id=f"e{i}",
                timestamp=T0 + timedelta(seconds=i),
                request_id=f"r{r}",
                invocation_id=f"i{r}",
                author="user" if step == 0 else "agent",
                message=message,
            )
        )
    return events


def summary_covering(events: list[SessionEvent], fraction: float) -> SessionSummary:
    last = events[max(0, int(len(events) * fraction) - 1)]
    return SessionSummary(
        app_name="bench",
        user_id="u",
        session_id="s",
        summary="The user asked about many files; each held ordinary text. " * 4,
        version=1,
        boundary=SummaryBoundary(cutoff_at=last.timestamp, last_event_id=last.event_id),
        model="m",
        prompt_version="p",
        created_at=T0,
        report=SummaryReport(trigger=TriggerReport(name="token_threshold")),
        job_id="j",
    )


def timed(fn: object, repeats: int) -> float:
    """Median milliseconds per call."""
    assert callable(fn)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def main() -> None:
    compaction = CompactionConfig(enabled=True, keep_recent_requests=1, tool_result_max_tokens=256)
    variants = {
        "full history": (AssemblyOptions(token_counter=COUNTER), False),
        "compaction on": (AssemblyOptions(token_counter=COUNTER, compaction=compaction), False),
        "summary (75%)": (AssemblyOptions(token_counter=COUNTER, add_session_summary=True), True),
        "summary + compaction": (
            AssemblyOptions(token_counter=COUNTER, add_session_summary=True, compaction=compaction),
            True,
        ),
    }
    print(f"{'events':>6}  {'variant':<22} {'ms/assembly':>11} {'prompt tokens':>13} {'saved':>8} {'saved %':>7}")
    for n in (16, 256, 1024):
        events = build_session(n)
        summary = summary_covering(events, 0.75)
        baseline = assemble(
            "You are a helpful agent.", None, events, "next question", options=variants["full history"][0]
        )
        base_tokens = baseline.report.prompt_tokens
        repeats = 200 if n <= 256 else 40
        for name, (opts, with_summary) in variants.items():
            s = summary if with_summary else None

            def run(
                s: SessionSummary | None = s,
                opts: AssemblyOptions = opts,
                events: list[SessionEvent] = events,
            ) -> int:
                return assemble(
                    "You are a helpful agent.", s, events, "next question", options=opts
                ).report.prompt_tokens

            run()  # warm-up
            ms = timed(run, repeats)
            tokens = run()
            saved = base_tokens - tokens
            print(f"{n:>6}  {name:<22} {ms:>11.3f} {tokens:>13,} {saved:>8,} {100 * saved / base_tokens:>6.1f}%")


if __name__ == "__main__":
    main()
