"""The summarize handler's stale/duplicate guard, with in-memory ledger and events log.

A job whose target the head summary already covers produces nothing (a sync
job is answered with that summary); a duplicate of a job that already ran is
stale; a job reaching beyond the head is rebased on it; versions only grow. A
sync request's ``join`` job is answered with the head, or with the failure of
the job it waited for.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from schemas import SessionEvent, SessionKey, SessionSummary, SummaryFailure, SummaryJob, SummaryReply
from schemas.settings import Settings
from streams.app.event_log import RawEvent
from streams.app.ledger import Head, head_of, summary_key
from streams.app.runtime import Topics, WorkerRuntime
from streams.app.summarize import SummarizeHandler
from streams.app.track import TrackHandler
from streams.app.tracked import table_key
from streams.rules.policy import policies_from_settings
from streams.summarizer import SummarizerLike, build_summarizer
from streams.summarizer.dynamic import DynamicSummarizer
from tests.unit.summarizer.helpers import SESSION, ScriptedModel, event


class MemoryLedger:
    """The ledger's read side: heads and given-up failures per (partition, key); ``record`` as the runtime does."""

    def __init__(self) -> None:
        self.heads: dict[tuple[int, str], Head] = {}
        self.failures: dict[tuple[int, str], SummaryFailure] = {}
        self.ready_calls: list[int] = []

    async def ready(self, partition: int) -> None:
        self.ready_calls.append(partition)

    def head(self, partition: int, key: str) -> Head | None:
        return self.heads.get((partition, key))

    def epoch_of(self, partition: int, session: str) -> int:
        return 0

    def failure(self, partition: int, key: str) -> SummaryFailure | None:
        return self.failures.get((partition, key))

    def record(self, partition: int, summary: SessionSummary, events_offset: int | None, at: int | None = None) -> None:
        key = summary_key(summary)
        self.failures.pop((partition, key), None)
        current = self.heads.get((partition, key))
        if current is None or current.version < summary.version:
            self.heads[(partition, key)] = head_of(summary, events_offset)

    def record_failure(self, partition: int, failure: SummaryFailure, at: int | None = None) -> None:
        if failure.gave_up:
            key = table_key(failure.app_name, failure.user_id, failure.session_id, failure.filter_key)
            self.failures[(partition, key)] = failure


class MemoryEventLog:
    """One events partition: event ``i`` at offset ``i``."""

    def __init__(self, events: list[SessionEvent]) -> None:
        self.records = [RawEvent(i, e.model_dump_json().encode()) for i, e in enumerate(events)]
        self.reads: list[tuple[int, int]] = []

    async def read(self, partition: int, start: int, end: int, key: bytes) -> list[RawEvent]:
        self.reads.append((start, end))
        return [r for r in self.records if start <= r.offset <= end]


EVENTS = [event(i, "user" if i % 2 == 0 else "agent", f"message {i} about topic {i}") for i in range(8)]


def job(upto: int, from_version: int = 0, reply_to: str | None = None, origin: str = "trigger") -> SummaryJob:
    return SummaryJob.model_validate(
        {
            "job_id": f"j-{from_version}-{upto}",
            "app_name": SESSION.app_name,
            "user_id": SESSION.user_id,
            "session_id": SESSION.session_id,
            "from_version": from_version,
            "upto": {
                "last_event_id": EVENTS[upto].event_id,
                "cutoff_at": EVENTS[upto].timestamp.isoformat(),
                "offset": upto,
            },
            "trigger": {"name": "event_threshold"},
            "origin": origin,
            "reply_to": reply_to,
            "created_at": datetime(2026, 1, 1, tzinfo=UTC).isoformat(),
            "events_from_offset": 0,
        }
    )


def handler() -> tuple[SummarizeHandler, MemoryLedger, MemoryEventLog, ScriptedModel]:
    ledger, log_, model = MemoryLedger(), MemoryEventLog(EVENTS), ScriptedModel(default="the summary",
                                                                                  context_window=100_000)  # fmt: skip
    summarizer = build_summarizer(Settings(), app_name=SESSION.app_name, model=model)

    def summarizer_for(app: str) -> SummarizerLike:
        return summarizer

    return SummarizeHandler(ledger, log_, summarizer_for), ledger, log_, model


def memory_runtime(model: Any, events: MemoryEventLog | None = None, settings: Settings | None = None) -> WorkerRuntime:
    """A worker runtime over the in-memory ledger and ``events`` (default: ``EVENTS``) summarizing with
    ``model`` under ``settings`` (default: the defaults); its ``send`` is the caller's to set."""
    settings = settings or Settings()
    summarizer = build_summarizer(settings, app_name=SESSION.app_name, model=model)

    def summarizer_for(app: str) -> SummarizerLike:
        return summarizer

    track = TrackHandler(policies_from_settings(settings.summary, settings.llm.model))
    runtime = WorkerRuntime(settings, Topics("ev", "jobs", "sum", "dl"), track, summarizer_for)
    ledger = MemoryLedger()
    runtime.summarize = SummarizeHandler(ledger, events if events is not None else MemoryEventLog(EVENTS),
                                         summarizer_for)  # fmt: skip
    runtime.ledger = ledger  # type: ignore[assignment]
    runtime.cache_ready.set()
    return runtime


async def test_first_job_summarizes_from_the_first_event() -> None:
    h, ledger, log_, model = handler()
    result = await h.handle(job(3), 0)
    assert result.outcome == "summary"
    assert isinstance(result.record, SessionSummary)
    assert result.record.version == 1 and result.record.previous_version is None
    assert result.record.boundary.last_event_id == EVENTS[3].event_id
    assert result.events_offset == 3 and result.events == 4
    assert log_.reads == [(0, 3)] and ledger.ready_calls == [0]
    assert len(model.requests) == 1


async def test_a_duplicate_of_a_job_that_ran_is_stale_and_calls_no_model() -> None:
    h, ledger, _, model = handler()
    first = await h.handle(job(3), 0)
    assert isinstance(first.record, SessionSummary)
    ledger.record(0, first.record, first.events_offset)
    again = await h.handle(job(3), 0)
    retried = await h.handle(job(3, origin="retry"), 0)
    assert (again.outcome, again.record) == ("stale", None)
    assert (retried.outcome, retried.record) == ("stale", None)
    assert len(model.requests) == 1


async def test_a_job_the_head_covers_is_stale_even_for_an_earlier_target() -> None:
    h, ledger, _, model = handler()
    first = await h.handle(job(5), 0)
    assert isinstance(first.record, SessionSummary)
    ledger.record(0, first.record, first.events_offset)
    older = await h.handle(job(3), 0)  # built on version 0, aiming below the head's boundary
    assert older.outcome == "stale" and older.record is None
    assert len(model.requests) == 1


async def test_a_covered_sync_job_is_answered_with_the_covering_summary_not_a_second_one() -> None:
    """A forced request whose events a summary already covers gets that summary (it used to get a skip)."""
    h, ledger, _, model = handler()
    first = await h.handle(job(3), 0)
    assert isinstance(first.record, SessionSummary)
    ledger.record(0, first.record, first.events_offset)
    answer = await h.handle(job(3, reply_to="corr-1"), 0)
    assert answer.outcome == "replied" and isinstance(answer.record, SummaryReply)
    assert answer.record.reply_to == "corr-1" and answer.record.summary == first.record
    assert len(model.requests) == 1


def join(upto: int, reply_to: str = "corr-j") -> SummaryJob:
    """A sync request's ``join`` job waiting for the decided boundary ``EVENTS[upto]``."""
    return job(upto, reply_to=reply_to, origin="join").model_copy(update={"job_id": f"join-{reply_to}"})


def gave_up(job_id: str, upto: int = 3, reason: str = "model refused: 400 invalid value") -> SummaryFailure:
    """The failure record of a job aiming at ``EVENTS[upto]``, given up."""
    return SummaryFailure(
        app_name=SESSION.app_name, user_id=SESSION.user_id, session_id=SESSION.session_id, job_id=job_id,
        error_class="PermanentError", reason=reason, created_at=datetime(2026, 1, 1, tzinfo=UTC), gave_up=True,
        retryable=False, attempts=1, upto_event_id=EVENTS[upto].event_id,
    )  # fmt: skip


async def test_a_join_is_answered_with_the_summary_of_the_job_it_waited_for() -> None:
    h, ledger, _, model = handler()
    first = await h.handle(job(3), 0)  # the round's job, run before the join (one job at a time per key)
    assert isinstance(first.record, SessionSummary)
    ledger.record(0, first.record, first.events_offset)
    answer = await h.handle(join(3), 0)
    assert answer.outcome == "replied" and isinstance(answer.record, SummaryReply)
    assert answer.record.summary == first.record and answer.record.reply_to == "corr-j"
    assert answer.record.job_id == "join-corr-j" and len(model.requests) == 1


async def test_a_join_gets_the_newest_summary_when_it_stops_short_of_the_target() -> None:
    """A summary holding recent events back ends before its job's target: still the one to build on."""
    h, ledger, _, _ = handler()
    first = await h.handle(job(2), 0)
    assert isinstance(first.record, SessionSummary)
    ledger.record(0, first.record, first.events_offset)
    answer = await h.handle(join(3), 0)
    assert isinstance(answer.record, SummaryReply) and answer.record.summary == first.record


async def test_a_join_whose_job_gave_up_is_answered_with_that_failure() -> None:
    h, ledger, _, model = handler()
    ledger.record_failure(0, gave_up("j-0-3"))
    answer = await h.handle(join(3), 0)
    failure = answer.record
    assert answer.outcome == "failed" and isinstance(failure, SummaryFailure)
    assert failure.error_class == "PermanentError" and failure.reply_to == "corr-j"
    assert "j-0-3 this request joined failed" in failure.reason and "model refused" in failure.reason
    # the track side must not count it as one more failure of the key (nor release another job)
    assert not failure.gave_up and failure.job_id == "join-corr-j" and failure.context_window is None
    assert not model.requests


async def test_a_later_ranges_failure_does_not_answer_a_join_waiting_for_an_earlier_boundary() -> None:
    """The track side gave the failed range back: the request waits for the boundary before it."""
    h, ledger, _, _ = handler()
    first = await h.handle(job(2), 0)  # a head short of e3 (as a job for e3 holding recent events back leaves)
    assert isinstance(first.record, SessionSummary)
    ledger.record(0, first.record, first.events_offset)
    ledger.record_failure(0, gave_up("j-1-5", upto=5))
    earlier = await h.handle(join(3), 0)
    assert isinstance(earlier.record, SummaryReply) and earlier.record.summary == first.record
    waited = await h.handle(join(5, reply_to="corr-k"), 0)
    assert isinstance(waited.record, SummaryFailure) and "j-1-5" in waited.record.reason


async def test_a_failure_record_names_the_target_of_its_job() -> None:
    h, _, _, _ = handler()
    assert h.failure(job(3), RuntimeError("boom")).upto_event_id == EVENTS[3].event_id


async def test_a_summary_after_the_failure_answers_the_join() -> None:
    h, ledger, _, _ = handler()
    ledger.record_failure(0, gave_up("j-0-3"))
    retried = await h.handle(job(3), 0)  # the range decided again, summarized this time
    assert isinstance(retried.record, SessionSummary)
    ledger.record(0, retried.record, retried.events_offset)
    answer = await h.handle(join(3), 0)
    assert isinstance(answer.record, SummaryReply) and answer.record.summary == retried.record


async def test_a_join_with_no_summary_to_name_says_there_was_nothing_to_summarize() -> None:
    h, _, _, model = handler()
    answer = await h.handle(join(3), 0)
    assert answer.outcome == "skipped" and isinstance(answer.record, SummaryFailure)
    assert answer.record.error_class == "SummarySkipped" and answer.record.reply_to == "corr-j"
    assert not model.requests


async def test_a_job_beyond_the_head_is_rebased_on_it_and_versions_grow() -> None:
    h, ledger, log_, model = handler()
    first = await h.handle(job(3), 0)
    assert isinstance(first.record, SessionSummary)
    ledger.record(0, first.record, first.events_offset)
    # a job built on version 0 (e.g. re-emitted before the first summary was absorbed) reaching e7
    rebased = await h.handle(job(7, from_version=0), 0)
    assert rebased.outcome == "summary"
    summary = rebased.record
    assert isinstance(summary, SessionSummary)
    assert summary.version == 2 and summary.previous_version == 1
    assert summary.previous_boundary == first.record.boundary
    assert summary.boundary.last_event_id == EVENTS[7].event_id
    assert log_.reads[-1] == (4, 7)  # the delta starts after the head's events offset
    assert rebased.events == 4
    prompt = str(model.requests[-1].messages)
    assert "message 4" in prompt and "message 2 about" not in prompt
    ledger.record(0, summary, rebased.events_offset)
    stale = await h.handle(job(7, from_version=1), 0)
    assert stale.outcome == "stale"


async def test_a_cache_hit_keeps_the_boundary_format_version() -> None:
    from streams.app.cache import SummaryCache
    from streams.rules.boundaries import BOUNDARY_FORMAT_VERSION

    h, ledger, _, model = handler()
    h.cache = SummaryCache()
    first = await h.handle(job(3), 0)
    assert isinstance(first.record, SessionSummary)
    ledger.record(0, first.record, first.events_offset)
    second = await h.handle(job(7, from_version=1), 0)
    assert isinstance(second.record, SessionSummary) and second.input_hash
    h.cache.put(second.input_hash, second.record)
    # the same input again (e.g. a replay with the same head): served from the cache as version 2
    ledger.heads = {(1, k[1]): v for k, v in ledger.heads.items()}
    cached = await h.handle(job(7, from_version=1), 1)
    assert cached.outcome == "cached" and isinstance(cached.record, SessionSummary)
    assert cached.record.version == 2 and cached.record.previous_version == 1
    assert cached.record.boundary.version == BOUNDARY_FORMAT_VERSION
    assert cached.record.boundary == second.record.boundary
    assert len(model.requests) == 2


async def test_the_jobs_request_context_reaches_a_dynamic_resolver() -> None:
    """Per-request markers pick the summarizer (the Go guide's SummaryCfg in ctx); distill's keys win."""
    ledger, log_ = MemoryLedger(), MemoryEventLog(EVENTS)
    model = ScriptedModel(default="picked", context_window=100_000)
    chosen = build_summarizer(Settings(), app_name=SESSION.app_name, model=model)
    seen: list[dict[str, Any]] = []

    def resolver(context: Mapping[str, Any], session: SessionKey | None) -> SummarizerLike | None:
        seen.append(dict(context))
        return chosen if context.get("summary_model") == "small" else None

    dynamic = DynamicSummarizer(resolver)
    h = SummarizeHandler(ledger, log_, lambda app: dynamic)
    marked = job(3).model_copy(update={"context": {"summary_model": "small", "job_id": "spoofed"}})
    result = await h.handle(marked, 0)
    assert result.outcome == "summary" and isinstance(result.record, SessionSummary)
    assert seen[-1]["summary_model"] == "small" and seen[-1]["job_id"] == marked.job_id
    unmarked = await SummarizeHandler(MemoryLedger(), log_, lambda app: dynamic).handle(job(3), 0)
    assert unmarked.outcome != "summary"


def _settings(**summary: Any) -> Settings:
    return Settings.model_validate({"summary": summary})


async def _address(settings: Settings) -> tuple[str | None, int]:
    """The cache address of ``job(7)`` under ``settings``, and the LLM calls a second handler makes
    for it with a cache filled by a first handler under default settings."""
    from streams.app.cache import SummaryCache

    cache = SummaryCache()
    base, _, _, _ = handler()
    base.cache = cache
    first = await base.handle(job(7), 0)
    assert first.outcome == "summary" and first.record is not None and first.input_hash
    cache.put(first.input_hash, first.record)  # type: ignore[arg-type]
    model = ScriptedModel(default="the summary", context_window=100_000)
    summarizer = build_summarizer(settings, app_name=SESSION.app_name, model=model)
    second = SummarizeHandler(MemoryLedger(), MemoryEventLog(EVENTS), lambda app: summarizer, cache)
    again = await second.handle(job(7), 0)
    return again.input_hash, len(model.requests)


async def test_the_cache_address_is_what_is_sent_so_output_settings_miss_it() -> None:
    # Unchanged settings: the address is the same, the summary comes from the cache (0 LLM calls).
    hit, calls = await _address(Settings())
    assert calls == 0
    # Each of these changes what the summarizer sends or keeps: a new address, an LLM call.
    changed = [
        _settings(keep_recent_rounds=2),
        _settings(skip_recent_events=3),
        _settings(max_summary_length=40),
        _settings(prompt="用一句话总结对话：{conversation_text}"),
    ]
    addresses = {hit}
    for settings in changed:
        address, calls = await _address(settings)
        assert calls == 1, settings.summary
        addresses.add(address)
    assert len(addresses) == 1 + len(changed)


async def test_a_summary_records_where_its_chain_began_and_every_summary_rolling_it_forward_keeps_it() -> None:
    from streams.app.cache import SummaryCache

    h, ledger, log_, _ = handler()
    h.cache = SummaryCache()
    first = await h.handle(job(3).model_copy(update={"events_from_offset": 2}), 0)  # the session starts at 2
    assert isinstance(first.record, SessionSummary) and first.record.chain_from_offset == 2
    assert log_.reads == [(2, 3)]
    ledger.record(0, first.record, first.events_offset)
    # the next pass reads after the boundary (from offset 4), but its chain still began at offset 2
    after = {"previous_boundary": first.record.boundary, "events_from_offset": 0}
    second = await h.handle(job(7, from_version=1).model_copy(update=after), 0)
    assert isinstance(second.record, SessionSummary) and second.record.chain_from_offset == 2
    assert log_.reads[-1] == (4, 7) and second.input_hash
    # a cache hit built on a head whose chain began elsewhere takes that head's start, not the cached one's
    h.cache.put(second.input_hash, second.record)
    whole = first.record.model_copy(update={"chain_from_offset": 0})
    ledger.heads = {(1, k[1]): head_of(whole, v.events_offset) for k, v in ledger.heads.items()}
    cached = await h.handle(job(7, from_version=1).model_copy(update=after), 1)
    assert cached.outcome == "cached" and isinstance(cached.record, SessionSummary)
    assert cached.record.chain_from_offset == 0
    # a head of an older build (start unknown) passes on "unknown"
    ledger.heads = {k: head_of(whole.model_copy(update={"chain_from_offset": None}), v.events_offset)
                    for k, v in ledger.heads.items()}  # fmt: skip
    h.cache = None
    unknown = await h.handle(job(7, from_version=1).model_copy(update=after), 1)
    assert isinstance(unknown.record, SessionSummary) and unknown.record.chain_from_offset is None


async def test_a_record_the_track_side_refused_as_oversized_is_in_no_summary() -> None:
    """Over ``kafka.max_record_bytes`` (CJK: three bytes a character), the track side dead-letters a record
    as ``OversizedRecord`` (the topic takes a little more): the pass must not read it into the summary
    all the same, or the dead letter says refused what a summary holds."""
    limit = 4_000
    big = event(2, "user", "超大的记录 MK-BIG " + "长" * 1_500)
    events = [*EVENTS[:2], big, *EVENTS[3:]]
    assert len(big.model_dump_json().encode()) > limit > len(big.message.content or "")
    assert all(len(e.model_dump_json().encode()) <= limit for e in events if e is not big)
    model = ScriptedModel(default="the summary", context_window=100_000)
    summarizer = build_summarizer(Settings(), app_name=SESSION.app_name, model=model)
    log_ = MemoryEventLog(events)
    h = SummarizeHandler(MemoryLedger(), log_, lambda app: summarizer, max_record_bytes=limit)
    result = await h.handle(job(3), 0)
    assert result.outcome == "summary" and result.events == 3
    text = str(model.requests[0].messages)
    assert "MK-BIG" not in text and all(f"message {i} about" in text for i in (0, 1, 3))
