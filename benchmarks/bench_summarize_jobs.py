"""A summary job's own CPU: the worker's summarize handler reading its delta from the record buffer.

The events of ``--sessions`` interleaved sessions go through the record buffer as the
track agent puts them (its decode beside each record, where the buffer takes it); then
one job per ``--every`` events of each session runs through ``SummarizeHandler``, each
rolling on the previous summary: a first pass fills the cache (a model echoing markers),
the timed pass is answered by it (a replay with a full cache hit: read, decode, cache
key; the events' JSON serialized afresh in each pass, as in the one pass of a replay).
Prints CPU per job and per event of the timed pass (process time, min / median of
``--repeat``), and whether jobs took the track agent's events. ``--keep-recent-rounds``
holds events back for the next job (their JSON is needed again by it).

    .venv/bin/python benchmarks/bench_summarize_jobs.py [--sessions 200] [--events 60] [--every 12] [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from schemas import SessionEvent, SessionSummary, SummaryFailure, SummaryJob
from schemas.settings import Settings
from streams.app.cache import SummaryCache
from streams.app.decoding import decode_event_record
from streams.app.event_log import RawEvent, RecentEvents
from streams.app.ledger import Head, head_of, summary_key
from streams.app.summarize import SummarizeHandler
from streams.summarizer import SummarizerLike, build_summarizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_replay import EchoModel

T0 = datetime(2026, 1, 1, tzinfo=UTC)
LIMIT = 8 * 1024 * 1024


class Ledger:
    def __init__(self) -> None:
        self.heads: dict[str, Head] = {}

    async def ready(self, partition: int) -> None:
        return None

    def head(self, partition: int, key: str) -> Head | None:
        return self.heads.get(key)

    def epoch_of(self, partition: int, session: str) -> int:
        return 0

    def failure(self, partition: int, key: str) -> SummaryFailure | None:
        return None


class Buffered:
    def __init__(self, recent: RecentEvents) -> None:
        self.recent = recent

    async def read(self, partition: int, start: int, end: int, key: bytes) -> list[RawEvent]:
        found = self.recent.read(partition, start, end, key)
        assert found is not None, "the buffer must hold the whole log"
        return found


def log(sessions: int, per_session: int) -> list[tuple[int, bytes, SessionEvent]]:
    """(offset, record key, event) interleaved: event n of every session, then n + 1."""
    out = []
    offset = 0
    for n in range(per_session):
        for s in range(sessions):
            e = SessionEvent.model_validate({
                "app_name": "bench", "user_id": "u", "session_id": f"s{s}", "event_id": f"s{s}-e{n}",
                "timestamp": (T0 + timedelta(seconds=n)).isoformat(), "author": "user" if n % 2 == 0 else "agent",
                "message": {"role": "user" if n % 2 == 0 else "assistant",
                            "content": f"M{n} message {n} of session {s} about the deployment script and its logs"},
            })  # fmt: skip
            out.append((offset, e.session_key.kafka_key(), e))
            offset += 1
    return out


def jobs_of(records: list[tuple[int, bytes, SessionEvent]], every: int) -> list[SummaryJob]:
    count: dict[str, int] = {}
    first: dict[str, int] = {}
    jobs = []
    for offset, _key, e in records:
        n = count[e.session_id] = count.get(e.session_id, 0) + 1
        first.setdefault(e.session_id, offset)
        if n % every == 0:
            jobs.append(SummaryJob.model_validate({
                "job_id": f"{e.session_id}-{n}", "app_name": e.app_name, "user_id": e.user_id,
                "session_id": e.session_id, "from_version": n // every - 1,
                "upto": {"last_event_id": e.event_id, "cutoff_at": e.timestamp.isoformat(), "offset": offset},
                "trigger": {"name": "event_threshold"}, "origin": "replay", "created_at": T0.isoformat(),
                "events_from_offset": first[e.session_id],
            }))  # fmt: skip
    return jobs


async def run_jobs(handler: SummarizeHandler, ledger: Ledger, jobs: list[SummaryJob], cache: SummaryCache) -> int:
    hits = 0
    ledger.heads.clear()
    for job in jobs:
        result = await handler.handle(job, 0)
        record = result.record
        if isinstance(record, SessionSummary):
            ledger.heads[summary_key(record)] = head_of(record, result.events_offset)
            if result.outcome == "summary" and result.input_hash:
                cache.put(result.input_hash, record)
            hits += result.outcome == "cached"
    return hits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--events", type=int, default=60, help="events per session")
    parser.add_argument("--every", type=int, default=12, help="a job per this many events of a session")
    parser.add_argument("--keep-recent-rounds", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    records = log(args.sessions, args.events)
    recent = RecentEvents()
    takes_events = "event" in inspect.signature(recent.add).parameters
    for offset, key, e in records:
        value = e.model_dump_json().encode()
        decoded = decode_event_record(value, LIMIT)  # the track agent's decode
        if takes_events:
            recent.add(0, offset, key, value, decoded if isinstance(decoded, SessionEvent) else None)
        else:
            recent.add(0, offset, key, value)
    settings = Settings.model_validate({"summary": {"keep_recent_rounds": args.keep_recent_rounds}})
    summarizer = build_summarizer(settings, app_name="bench", model=EchoModel())

    def summarizer_for(app: str) -> SummarizerLike:
        return summarizer

    cache, ledger = SummaryCache(), Ledger()
    handler = SummarizeHandler(ledger, Buffered(recent), summarizer_for, cache, max_record_bytes=LIMIT)
    jobs = jobs_of(records, args.every)
    asyncio.run(run_jobs(handler, ledger, jobs, cache))  # fills the cache
    try:  # each timed pass serializes as a first pass does (the events' JSON of the filling pass let go)
        from streams.summarizer import event_json

        forget = event_json._memo.clear
    except ImportError:
        forget = dict[str, str]().clear
    per_job = []
    for _ in range(args.repeat):
        forget()
        cpu = time.process_time()
        hits = asyncio.run(run_jobs(handler, ledger, jobs, cache))
        per_job.append((time.process_time() - cpu) / len(jobs) * 1e6)
        assert hits == len(jobs), f"{hits} of {len(jobs)} jobs answered by the cache"
    events = len(records)
    lo, mid = min(per_job), statistics.median(per_job)
    print(
        f"{len(jobs)} jobs over {events} events ({args.sessions} sessions, keep_recent_rounds "
        f"{args.keep_recent_rounds}); buffer hands jobs the track agent's events: {takes_events}; "
        f"CPU per job {lo:.0f} / {mid:.0f} us, per event {lo * len(jobs) / events:.1f} / "
        f"{mid * len(jobs) / events:.1f} us (min / median of {args.repeat}, full cache hit)"
    )


if __name__ == "__main__":
    main()
