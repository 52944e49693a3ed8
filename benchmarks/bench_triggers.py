"""Throughput of the trigger engine: ``evolve`` + ``decide`` per event.

Runs the track agent's per-event work (:func:`streams.rules.planner.apply_event`
over every affected key, plus ``on_summary`` when a job fires, as if the summary
came back at once) over a generated mix of user messages, tool calls, long tool
results and answers across several branches. Prints events/s with the simple
counter, with tiktoken, and raw tiktoken ``encode_ordinary`` throughput on the
same threshold text.

    .venv/bin/python -m benchmarks.bench_triggers [--events N] [--repeat R]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from schemas import Message, SessionEvent, SessionSummary, SummaryBoundary, SummaryJob, SummaryReport
from streams.rules.planner import apply_event
from streams.rules.policy import SummaryPolicy
from streams.rules.threshold_text import conversation_lines, reasoning_text
from streams.rules.tokens import SimpleTokenCounter, TiktokenCounter, TokenCounter
from streams.rules.trigger_state import SessionTriggerState, on_summary

APP = "bench"
BRANCHES = ("", APP, f"{APP}/research", f"{APP}/research/web", f"{APP}/coder")
WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "lazy",
    "dog",
    "summary",
    "session",
    "agent",
    "tool",
    "result",
    "query",
    "answer",
    "kafka",
    "stream",
    "partition",
    "offset",
    "boundary",
    "token",
    "window",
    "context",
    "model",
    "request",
    "latency",
    "42",
    "réponse",
    "数据",
    "función",
]


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def _args(rng: random.Random) -> str:
    return '{"q": "' + _text(rng, 4) + '"}'


def generate(n_events: int, sessions: int = 50, seed: int = 7) -> list[SessionEvent]:
    """Requests of: a user message, 0-3 tool rounds (calls + results, some long), an answer."""
    rng = random.Random(seed)
    t0 = datetime(2025, 1, 1, tzinfo=UTC)
    clocks = [0.0] * sessions
    counters = [0] * sessions
    events: list[SessionEvent] = []

    def add(s: int, key: str, rid: str, message: dict[str, object], author: str = "agent") -> None:
        counters[s] += 1
        clocks[s] += rng.uniform(0.2, 5.0)
        events.append(
            SessionEvent(
                app_name=APP,
                user_id=f"u{s % 7}",
                session_id=f"s{s}",
                event_id=f"s{s}-e{counters[s]}",
                timestamp=t0 + timedelta(seconds=clocks[s]),
                request_id=rid,
                author=author,
                filter_key=key,
                message=Message.model_validate(message),
                model="gpt-4o",
            )
        )

    request = 0
    while len(events) < n_events:
        s = rng.randrange(sessions)
        request += 1
        rid = f"r{request}"
        if rng.random() < 0.2:
            clocks[s] += rng.uniform(60, 900)  # an idle gap before the request
        add(s, "", rid, {"role": "user", "content": _text(rng, rng.randint(5, 40))}, author="user")
        key = rng.choice(BRANCHES)
        for _ in range(rng.randint(0, 3)):
            calls = [(f"c{request}-{i}", rng.choice(("search", "read_file", "run"))) for i in range(rng.randint(1, 2))]
            add(
                s,
                key,
                rid,
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": cid, "type": "function", "function": {"name": fn, "arguments": _args(rng)}}
                        for cid, fn in calls
                    ],
                },
            )
            for cid, fn in calls:
                size = rng.choice((20, 60, 200, 1200))  # words; the last is a long tool result (~7 KB)
                add(s, key, rid, {"role": "tool", "tool_call_id": cid, "name": fn, "content": _text(rng, size)})
        add(
            s,
            key,
            rid,
            {"role": "assistant", "content": _text(rng, rng.randint(20, 150)), "reasoning_content": _text(rng, 15)},
        )
    return events[:n_events]


def run_engine(events: list[SessionEvent], policy: SummaryPolicy) -> tuple[float, int]:
    """Seconds for the whole fold (with immediate summaries), and the number of jobs."""
    table: dict[tuple[str, str], SessionTriggerState] = {}
    jobs = 0
    start = time.perf_counter()
    for offset, event in enumerate(events):
        sid = event.session_id
        outcome = apply_event(
            event,
            policy,
            _Lookup(table, sid),
            offset=offset,
        )
        for key, state in outcome.states.items():
            table[(sid, key)] = state
        for job in outcome.jobs:
            jobs += 1
            key = job.filter_key
            state = table[(sid, key)]
            table[(sid, key)] = on_summary(state, _summary(job, state.version + 1))
    return time.perf_counter() - start, jobs


class _Lookup(dict[str, SessionTriggerState | None]):
    """A read-through view of the table for one session (what a Faust table lookup gives)."""

    def __init__(self, table: dict[tuple[str, str], SessionTriggerState], session_id: str) -> None:
        super().__init__()
        self._table = table
        self._sid = session_id

    def get(self, key: str, default: object = None) -> SessionTriggerState | None:  # type: ignore[override]
        return self._table.get((self._sid, key))


def _summary(job: SummaryJob, version: int) -> SessionSummary:
    upto = job.upto
    return SessionSummary.model_construct(
        app_name=job.app_name,
        user_id=job.user_id,
        session_id=job.session_id,
        filter_key=job.filter_key,
        summary="",
        version=version,
        boundary=SummaryBoundary(cutoff_at=upto.cutoff_at, last_event_id=upto.last_event_id),
        model="m",
        prompt_version="p",
        created_at=upto.cutoff_at,
        report=SummaryReport.model_construct(),
        job_id=job.job_id,
    )


def raw_encode(texts: list[str], encode: Callable[[str], object]) -> float:
    start = time.perf_counter()
    for text in texts:
        if text:
            encode(text)
    return time.perf_counter() - start


def best(fn: Callable[[], float], repeat: int) -> float:
    return min(fn() for _ in range(repeat))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)

    events = generate(args.events)
    counted = [e for e in events if not e.partial and not e.skip_summarization]
    texts = [t for e in counted for t in (conversation_lines(e), reasoning_text(e))]
    mb = sum(len(t.encode()) for t in texts) / 1e6
    branches = sorted({e.filter_key for e in events})
    sessions = len({e.session_id for e in events})
    print(f"{len(events)} events, {sessions} sessions, branches {branches}, {mb:.1f} MB text")

    simple_counter: TokenCounter = SimpleTokenCounter()
    tiktoken_counter = TiktokenCounter("gpt-4o")
    results: dict[str, float] = {}
    for name, counter in (("simple", simple_counter), ("tiktoken", tiktoken_counter)):
        policy = SummaryPolicy(counter=counter)
        jobs = 0

        def once(policy: SummaryPolicy = policy) -> float:
            nonlocal jobs
            seconds, jobs = run_engine(events, policy)
            return seconds

        seconds = best(once, args.repeat)
        results[name] = seconds
        print(f"evolve+decide, {name:8s} counter: {len(events) / seconds:>10,.0f} events/s  ({jobs} jobs)")

    encoding = tiktoken_counter._encoding
    raw = best(lambda: raw_encode(texts, encoding.encode_ordinary), args.repeat)
    print(f"raw tiktoken encode_ordinary:     {len(events) / raw:>10,.0f} events/s  (same text)")
    print(f"tiktoken engine / raw encode time: {results['tiktoken'] / raw:.2f}x  (goal <= 1.2x)")
    verdict = "meets" if len(events) / results["simple"] >= 100_000 else "misses"
    print(f"simple engine: {verdict} the 100k events/s goal")


if __name__ == "__main__":
    main()
