"""Throughput of the trigger engine: ``evolve`` + ``decide`` per event.

Over a generated mix of user messages, tool calls, long tool results (up to
~7 KB) and answers across several branches, with the Go guide's default checks,
prints events/s and µs/event for

(a) the issue's measure: the event's facts (one token count), ``evolve`` and
    ``decide`` on the state of the event's own key;
(b) the track agent's whole per-event path: ``affected_keys`` +
    :func:`streams.rules.planner.apply_event` over every affected key with the
    full-session cascade, job building and state write-back;

both with the simple counter and with tiktoken, next to raw tiktoken
``encode_ordinary`` over exactly the threshold text the engine counts (on fresh
string objects, like the engine's). A fired
decision (a) or job (b) is answered at once with ``on_summary``. A last line folds
one long session that never summarizes (the pending index only grows).

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

from schemas import (
    SCHEMA_VERSION,
    Message,
    SessionEvent,
    SessionSummary,
    SummaryBoundary,
    SummaryReport,
    SummaryStats,
    TriggerReport,
)
from streams.rules.boundaries import from_micros
from streams.rules.checks import EventThreshold
from streams.rules.counters import PendingEvent
from streams.rules.event_facts import event_facts
from streams.rules.planner import affected_keys, apply_event
from streams.rules.policy import SummaryPolicy
from streams.rules.threshold_text import conversation_lines, reasoning_text
from streams.rules.tokens import SimpleTokenCounter, TiktokenCounter
from streams.rules.trigger_state import SessionTriggerState, decide, evolve, new_state, on_summary

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


_REPORT = SummaryReport(trigger=TriggerReport(name="manual"))
_STATS = SummaryStats()
_RECORDS: dict[tuple[str, str, str, int, str, str], SessionSummary] = {}


def _summary(
    app: str, user: str, session: str, key: str, version: int, upto: PendingEvent, job_id: str
) -> SessionSummary:
    """The summary record the summarizer would send back (what the table receives).

    Each distinct record is built once and reused by later runs: the agent gets
    it decoded from the summaries topic, so building it is not the engine's work
    (``on_summary`` is, and is timed).
    """
    memo = (session, key, job_id, version, upto.event_id, app)
    found = _RECORDS.get(memo)
    if found is not None:
        return found
    cutoff = from_micros(upto.ts)
    record = SessionSummary.model_construct(
        schema_version=SCHEMA_VERSION,
        type="summary",
        app_name=app,
        user_id=user,
        session_id=session,
        filter_key=key,
        summary="",
        version=version,
        previous_version=None,
        boundary=SummaryBoundary(cutoff_at=cutoff, last_event_id=upto.event_id),
        previous_boundary=None,
        model="m",
        prompt_version="p",
        created_at=cutoff,
        stats=_STATS,
        report=_REPORT,
        job_id=job_id,
        reply_to=None,
        caught_up=True,
    )
    _RECORDS[memo] = record
    return record


def run_own_key(events: list[SessionEvent], policy: SummaryPolicy) -> tuple[float, int]:
    """(a) Per event: its facts (one token count), ``evolve`` on the state of the
    event's own key, ``decide`` on it when the event may trigger; a fired decision
    is answered at once with ``on_summary``. Seconds, and the number of fires."""
    table: dict[tuple[str, str], SessionTriggerState] = {}
    counter = policy.counter
    fired = 0
    start = time.process_time()
    for offset, event in enumerate(events):
        facts = event_facts(event, counter, offset)
        tk = (event.session_id, event.filter_key)
        state = table.get(tk) or new_state(event.app_name, event.user_id, event.session_id, event.filter_key)
        state = table[tk] = evolve(state, facts)
        if facts.model_output:
            decision = decide(state, policy, facts)
            if decision.fire and decision.upto is not None:
                fired += 1
                s = _summary(
                    state.app_name, state.user_id, state.session_id, state.filter_key,
                    state.version + 1, decision.upto, f"j{offset}",
                )  # fmt: skip
                table[tk] = on_summary(state, s)
    return time.process_time() - start, fired


def run_engine(events: list[SessionEvent], policy: SummaryPolicy) -> tuple[float, int]:
    """(b) The track agent's per-event work: ``affected_keys``, ``apply_event`` over
    every affected key with the cascade, state write-back, and each job answered
    at once with ``on_summary``. Seconds, and the number of jobs."""
    table: dict[tuple[str, str], SessionTriggerState] = {}
    jobs = 0
    start = time.process_time()
    for offset, event in enumerate(events):
        sid = event.session_id
        full = table.get((sid, ""))
        keys = affected_keys(event, policy, full)
        outcome = apply_event(event, policy, {k: table.get((sid, k)) for k in keys}, offset=offset)
        for key, state in outcome.states.items():
            table[(sid, key)] = state
        for job in outcome.jobs:
            jobs += 1
            key = job.filter_key
            state = table[(sid, key)]
            upto = state.pending[-1] if state.pending[-1].event_id == job.upto.last_event_id else None
            if upto is None:
                upto = next(p for p in state.pending if p.event_id == job.upto.last_event_id)
            s = _summary(job.app_name, job.user_id, sid, key, state.version + 1, upto, job.job_id)
            table[(sid, key)] = on_summary(state, s)
    return time.process_time() - start, jobs


def raw_encode(texts: list[str], encode: Callable[[str], object], fresh: bool = True) -> float:
    """Seconds to encode ``texts``. ``fresh``: on new ``str`` objects, as the engine
    gets them (decoded from the log); encoding the same objects again is faster,
    because CPython caches a string's UTF-8 form on its first encode."""
    if fresh:
        texts = [t.encode().decode() for t in texts]
    start = time.process_time()
    for text in texts:
        if text:
            encode(text)
    return time.process_time() - start


def best(fn: Callable[[], float], repeat: int) -> float:
    return min(fn() for _ in range(repeat))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)

    events = generate(args.events)
    n = len(events)
    counted = [e for e in events if not e.partial and not e.skip_summarization]
    texts = [t for e in counted for t in (conversation_lines(e), reasoning_text(e))]
    mb = sum(len(t.encode()) for t in texts) / 1e6
    branches = sorted({e.filter_key for e in events})
    sessions = len({e.session_id for e in events})
    print(f"{n} events, {sessions} sessions, branches {branches}, {mb:.1f} MB threshold text")
    print(f"best of {args.repeat} runs, process CPU time; the whole fold is timed, summaries applied as jobs fire\n")

    tiktoken_counter = TiktokenCounter("gpt-4o")
    encoding = tiktoken_counter._encoding
    raw = best(lambda: raw_encode(texts, encoding.encode_ordinary), args.repeat)
    raw_cached = best(lambda: raw_encode(texts, encoding.encode_ordinary, fresh=False), args.repeat)

    def line(label: str, seconds: float, note: str) -> None:
        print(f"{label:44s} {n / seconds:>9,.0f} events/s  {seconds / n * 1e6:6.2f} µs/event  {note}")

    results: dict[tuple[str, str], float] = {}
    for name, counter in (("simple", SimpleTokenCounter()), ("tiktoken", tiktoken_counter)):
        policy = SummaryPolicy(counter=counter)
        for path, runner in (("own key: evolve+decide", run_own_key), ("apply_event + cascade", run_engine)):
            count = 0

            def once(policy: SummaryPolicy = policy, runner: Runner = runner) -> float:
                nonlocal count
                seconds, count = runner(events, policy)
                return seconds

            seconds = best(once, args.repeat)
            results[(name, path)] = seconds
            extra = ""
            if name == "tiktoken":
                extra = f"  {seconds / raw:.2f}x raw encode, {(seconds - raw) / n * 1e6:.2f} µs/event over it"
            line(f"{path}, {name} counter", seconds, f"({count} {'fires' if 'own' in path else 'jobs'}){extra}")
    line("raw tiktoken encode_ordinary, same text", raw, "(fresh str objects: the baseline)")
    line("  same, str objects reused", raw_cached, "(UTF-8 form cached by CPython: not what the engine sees)")

    long_events = generate(args.events, sessions=1, seed=11)
    quiet = SummaryPolicy(counter=SimpleTokenCounter(), checks=(EventThreshold(10**9),))
    seconds = best(lambda: run_engine(long_events, quiet)[0], args.repeat)
    line("one session, no summary (pending grows)", seconds, "apply_event + cascade, simple")

    print()
    simple_rate = n / results[("simple", "own key: evolve+decide")]
    ratio = results[("tiktoken", "own key: evolve+decide")] / raw
    verdict = "met" if simple_rate >= 1e5 else "missed"
    print(f"goal >= 100k events/s (simple, evolve+decide): {simple_rate:,.0f} -> {verdict}")
    print(f"goal <= 1.2x raw encode (tiktoken, evolve+decide): {ratio:.2f}x -> {'met' if ratio <= 1.2 else 'missed'}")


Runner = Callable[[list[SessionEvent], SummaryPolicy], tuple[float, int]]


if __name__ == "__main__":
    main()
