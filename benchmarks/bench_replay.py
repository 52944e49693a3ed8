"""Replay throughput: the track and summarize use cases over a log, in one process (no Kafka).

A live run (the real summarizer, a model echoing its input's markers) fills the
content-addressed cache; then the same log is replayed

(a) unchanged: every job is answered by the cache — 0 LLM calls;
(b) with a changed prompt: every job misses (LLM calls = boundaries to redo);

and a dry run counts keys, boundaries and cache hits without any model call.
The boundaries and texts of (a) must equal the live run's (checked).

    .venv/bin/python -m benchmarks.bench_replay [--sessions N] [--rounds R]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from schemas import SessionEvent
from schemas.settings import Settings
from streams.app.cache import SummaryCache
from streams.app.inprocess import InProcessReplay, ReplayStats, records_of
from streams.rules.policy import policies_from_settings
from streams.summarizer import build_summarizer
from streams.summarizer.model import ModelResponse
from streams.summarizer.request import ChatRequest

T0 = datetime(2026, 1, 1, tzinfo=UTC)
MARKER = re.compile(r"\bM\d+\b")


class EchoModel:
    name = "echo"
    context_window = 128_000
    provider_budget = None

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, request: ChatRequest) -> ModelResponse:
        self.calls += 1
        text = "\n".join(str(m.get("content") or "") for m in request.messages)
        return ModelResponse(text=" ".join(list(dict.fromkeys(MARKER.findall(text)))[-40:]), model=self.name)


def session_events(sessions: int, rounds: int) -> list[SessionEvent]:
    out: list[SessionEvent] = []
    n = 0
    for r in range(rounds):
        for s in range(sessions):
            for role, text in (
                ("user", "请帮我看看这个问题"),
                ("assistant", "好的，我来分析一下"),
                ("assistant", "结论如下"),
            ):
                out.append(
                    SessionEvent(
                        app_name="bench",
                        user_id=f"u{s % 7}",
                        session_id=f"s{s}",
                        event_id=f"e{n}",
                        timestamp=T0 + timedelta(milliseconds=n),
                        request_id=f"s{s}-r{r}",
                        author="user" if role == "user" else "agent",
                        message={"role": role, "content": f"{text} M{n}"},
                    )
                )
                n += 1
    return out


def replay(settings: Settings, model: EchoModel, cache: SummaryCache, records: list, dry: bool = False) -> ReplayStats:
    policies = policies_from_settings(settings.summary, settings.llm.model)
    summarizer = build_summarizer(settings, model=model)  # type: ignore[arg-type]
    engine = InProcessReplay(policies, lambda app: summarizer, cache, dry_run=dry)
    return asyncio.run(engine.run(records))


def line(name: str, stats: ReplayStats, calls: int) -> str:
    return (
        f"{name:<26} {stats.events:>7} events {stats.events_per_s:>8,.0f} events/s "
        f"({stats.events_per_cpu_s:>7,.0f} per CPU s)  keys {stats.keys:>5}  "
        f"boundaries {stats.jobs:>6}  cache hits {stats.cache_hits:>6}  LLM calls {calls:>6}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--event-threshold", type=int, default=12)
    args = parser.parse_args()
    records = records_of(session_events(args.sessions, args.rounds), partitions=4)
    base = Settings.model_validate({"summary": {"event_threshold": args.event_threshold}})
    changed = Settings.model_validate(
        {"summary": {"event_threshold": args.event_threshold, "prompt": "请用要点总结：{conversation_text}"}}
    )
    cache = SummaryCache(max_entries=1_000_000)
    model = EchoModel()
    live = replay(base, model, cache, records)
    print(line("live (fills the cache)", live, model.calls))
    dry = replay(base, EchoModel(), cache, records, dry=True)
    print(line("dry run, unchanged", dry, 0) + f"  (would call the LLM {dry.llm_calls} times)")
    model_a = EchoModel()
    hit = replay(base, model_a, cache, records)
    print(line("replay, full cache hit", hit, model_a.calls))
    assert model_a.calls == 0 and hit.boundaries == live.boundaries and hit.texts == live.texts
    dry_b = replay(changed, EchoModel(), cache, records, dry=True)
    print(line("dry run, changed prompt", dry_b, 0) + f"  (would call the LLM {dry_b.llm_calls} times)")
    model_b = EchoModel()
    redo = replay(changed, model_b, cache, records)
    print(line("replay, changed prompt", redo, model_b.calls))
    assert redo.jobs == live.jobs and [b for b in redo.boundaries.values()] == [b for b in live.boundaries.values()]


if __name__ == "__main__":
    main()
