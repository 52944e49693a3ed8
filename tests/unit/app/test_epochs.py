"""Summary epochs on the worker: the switch decision, the heads book, and the line the worker rolls forward.

The oracle is the text the model is sent: after a session adopts an epoch, the
next pass of a key must roll forward *that epoch's* head (its text in the
request as the previous summary), never the head of the line it left — also
when the switch lands while the pass is at the model.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

from schemas import (
    AdoptedHead,
    AdoptEpoch,
    EpochAdopted,
    SessionSummary,
    SummaryBoundary,
    SummaryFailure,
    SummaryJob,
    SummaryReport,
    TriggerReport,
)
from schemas.epochs import EPOCH_ALREADY_SERVED, EPOCH_MISSING_HISTORY, EPOCH_NOT_CAUGHT_UP, EPOCH_UNKNOWN
from schemas.settings import KafkaSettings, Settings
from streams.app.coordinates import Coordinates
from streams.app.epochs import decide_adoption
from streams.app.heads import Head, HeadBook, head_of, session_id_of
from streams.app.ledger import SummaryLedger
from streams.app.runtime import Backoff, Topics, WorkerRuntime
from streams.app.summarize import JobResult, SummarizeHandler
from streams.app.track import TrackHandler
from streams.app.tracked import TrackedKey
from streams.rules.policy import policies_from_settings
from streams.rules.trigger_state import new_state
from streams.summarizer import SummarizerLike, build_summarizer
from streams.summarizer.request import ChatRequest
from tests.unit.app.test_summarize_handler import EVENTS, MemoryEventLog, job
from tests.unit.summarizer.helpers import SESSION, ScriptedModel

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SESSION_ID = session_id_of(*SESSION)
COORDS = Coordinates("jobs", 0, 7)


def summary(
    version: int, upto: int, text: str, *, epoch: int = 0, key: str = "", chain_from: int | None = None
) -> SessionSummary:
    return SessionSummary(
        app_name=SESSION.app_name, user_id=SESSION.user_id, session_id=SESSION.session_id, filter_key=key,
        summary=text, version=version, epoch=epoch, chain_from_offset=chain_from,
        boundary=SummaryBoundary(cutoff_at=EVENTS[upto].timestamp, last_event_id=EVENTS[upto].event_id),
        model="m", prompt_version="p", created_at=NOW, report=SummaryReport(trigger=TriggerReport(name="manual")),
        job_id=f"j-e{epoch}-v{version}",
    )  # fmt: skip


def adopt(epoch: int, *heads: tuple[SessionSummary, int], caught_up: bool = True, cid: str = "c1") -> AdoptEpoch:
    return AdoptEpoch(
        app_name=SESSION.app_name, user_id=SESSION.user_id, session_id=SESSION.session_id, command_id=cid,
        epoch=epoch, heads=tuple(AdoptedHead(summary=s, events_offset=o) for s, o in heads),
        require_caught_up=caught_up, reply_to=f"r-{cid}",
    )  # fmt: skip


def heads(*items: tuple[SessionSummary, int]) -> dict[str, Head]:
    return {s.filter_key: head_of(s, o) for s, o in items}


# -- the decision ----------------------------------------------------------------------------------------------


def test_an_epoch_reaching_every_live_boundary_is_adopted_and_the_left_heads_travel_with_the_switch() -> None:
    live = heads((summary(2, 5, "旧的摘要"), 5), (summary(1, 3, "分支", key="app/b"), 3))
    command = adopt(1, (summary(2, 5, "新的摘要", epoch=1), 5), (summary(1, 3, "新分支", epoch=1, key="app/b"), 3))
    answer = decide_adoption(command, 0, live, None, NOW)
    assert isinstance(answer, EpochAdopted)
    assert (answer.epoch, answer.previous_epoch, answer.caught_up) == (1, 0, True)
    assert [(h.summary.filter_key, h.summary.summary) for h in answer.heads] == [("", "新的摘要"), ("app/b", "新分支")]
    assert [(h.summary.summary, h.events_offset) for h in answer.replaced] == [("旧的摘要", 5), ("分支", 3)]
    assert answer.reply_to == "r-c1"


def test_an_epoch_behind_the_live_line_is_refused_naming_the_key_unless_forced() -> None:
    live = heads((summary(3, 7, "live"), 7), (summary(1, 3, "b", key="app/b"), 3))
    command = adopt(1, (summary(2, 5, "new", epoch=1), 5))  # behind on "", nothing for app/b
    refused = decide_adoption(command, 0, live, {}, NOW)
    assert isinstance(refused, SummaryFailure) and refused.error_class == EPOCH_NOT_CAUGHT_UP
    assert "(session): epoch v2 at e5, live v3 at e7" in refused.reason
    assert "app/b: no summary in the epoch" in refused.reason
    forced = decide_adoption(command.model_copy(update={"require_caught_up": False}), 0, live, {}, NOW)
    assert isinstance(forced, EpochAdopted) and forced.caught_up is False
    assert [h.summary.filter_key for h in forced.heads] == [""]  # app/b starts over on the epoch


def test_switching_to_the_served_epoch_or_to_one_without_heads_is_refused() -> None:
    live = heads((summary(1, 3, "live"), 3))
    served = decide_adoption(adopt(0), 0, live, None, NOW)
    assert isinstance(served, SummaryFailure) and served.error_class == EPOCH_ALREADY_SERVED
    unknown = decide_adoption(adopt(2, caught_up=False), 1, live, None, NOW)
    assert isinstance(unknown, SummaryFailure) and unknown.error_class == EPOCH_UNKNOWN


def test_switching_back_to_the_live_line_the_session_left_without_summaries_starts_it_over() -> None:
    live = heads((summary(1, 3, "epoch one", epoch=1), 3))
    back = decide_adoption(adopt(0, caught_up=False), 1, live, {}, NOW)
    assert isinstance(back, EpochAdopted) and back.heads == () and len(back.replaced) == 1


def test_a_switch_back_starts_from_the_parked_heads_the_newer_of_them_and_the_commands() -> None:
    parked = heads((summary(4, 7, "continued", epoch=1), 7))
    command = adopt(1, (summary(2, 5, "as replayed", epoch=1), 5), caught_up=False)
    answer = decide_adoption(command, 0, heads((summary(3, 6, "live"), 6)), parked, NOW)
    assert isinstance(answer, EpochAdopted)
    assert [(h.summary.version, h.summary.summary) for h in answer.heads] == [(4, "continued")]


def test_an_epoch_whose_chain_starts_after_the_sessions_first_record_is_refused_even_when_forced() -> None:
    # The replay read the session from offset 4 (Kafka's retention dropped 0..3): its heads reach
    # the live boundary, yet they roll forward nothing of e0..e3, which the request cuts at e7.
    live = heads((summary(2, 7, "live", chain_from=0), 7))
    late = adopt(1, (summary(1, 7, "from e4 on", epoch=1, chain_from=4), 7))
    for command in (late, late.model_copy(update={"require_caught_up": False})):
        refused = decide_adoption(command, 0, live, None, NOW, first_offset=0)
        assert isinstance(refused, SummaryFailure) and refused.error_class == EPOCH_MISSING_HISTORY
        assert "(session): v1's chain starts at events offset 4, the session at 0" in refused.reason
    # one late key among caught-up ones is enough
    branch = adopt(1, (summary(1, 7, "whole", epoch=1, chain_from=0), 7),
                   (summary(1, 5, "late branch", epoch=1, key="app/b", chain_from=2), 5))  # fmt: skip
    refused = decide_adoption(branch, 0, live, None, NOW, first_offset=0)
    assert isinstance(refused, SummaryFailure) and refused.error_class == EPOCH_MISSING_HISTORY
    assert "app/b: v1's chain starts at events offset 2" in refused.reason and "(session)" not in refused.reason
    # a parked head counts as much as the command's
    parked = heads((summary(3, 7, "continued late", epoch=1, chain_from=4), 7))
    refused = decide_adoption(adopt(1, caught_up=False), 0, live, parked, NOW, first_offset=0)
    assert isinstance(refused, SummaryFailure) and refused.error_class == EPOCH_MISSING_HISTORY


def test_a_chain_from_the_sessions_first_record_or_of_unknown_start_is_judged_as_before() -> None:
    live = heads((summary(2, 7, "live", chain_from=3), 7))
    # a chain from the session's first record (after a deletion: the first record since), or before it
    for start in (3, 0):
        answer = decide_adoption(adopt(1, (summary(1, 7, "x", epoch=1, chain_from=start), 7)), 0, live, None, NOW,
                                 first_offset=3)  # fmt: skip
        assert isinstance(answer, EpochAdopted) and answer.caught_up
    # a summary of an older build (start unknown), or a session whose first record is not known
    unknown = decide_adoption(adopt(1, (summary(1, 7, "old build", epoch=1), 7)), 0, live, None, NOW, first_offset=3)
    assert isinstance(unknown, EpochAdopted)
    not_known = decide_adoption(adopt(1, (summary(1, 7, "x", epoch=1, chain_from=5), 7)), 0, live, None, NOW)
    assert isinstance(not_known, EpochAdopted)
    # and a late chain that is also behind is refused for its missing history, not as merely behind
    behind = decide_adoption(adopt(1, (summary(1, 5, "x", epoch=1, chain_from=5), 5)), 0, live, None, NOW,
                             first_offset=3)  # fmt: skip
    assert isinstance(behind, SummaryFailure) and behind.error_class == EPOCH_MISSING_HISTORY


def test_an_epoch_of_a_from_latest_run_is_adopted_only_where_the_chain_is_shown_to_start_with_the_session() -> None:
    live = heads((summary(2, 7, "live", chain_from=3), 7))

    def tail(head: SessionSummary, first_offset: int | None) -> EpochAdopted | SummaryFailure:
        command = adopt(1, (head, 7)).model_copy(update={"require_known_start": True})
        return decide_adoption(command, 0, live, None, NOW, first_offset=first_offset)

    # a session that began after the run started: its chain starts at its first record
    assert isinstance(tail(summary(1, 7, "x", epoch=1, chain_from=3), 3), EpochAdopted)
    # what a plain switch lets through (an unknown start) is refused, naming why
    for head, first in ((summary(1, 7, "x", epoch=1, chain_from=3), None), (summary(1, 7, "old", epoch=1), 3)):
        refused = tail(head, first)
        assert isinstance(refused, SummaryFailure) and refused.error_class == EPOCH_MISSING_HISTORY
        assert "not known" in refused.reason or "does not say" in refused.reason, refused.reason
    # and a chain starting after the session's first record, as before
    late = tail(summary(1, 7, "x", epoch=1, chain_from=5), 3)
    assert isinstance(late, SummaryFailure) and "starts at events offset 5" in late.reason


# -- the heads book --------------------------------------------------------------------------------------------


def _switch(book: HeadBook, epoch: int, at: int, *new: SessionSummary, cid: str = "c1") -> EpochAdopted:
    live = book.session_heads(0, SESSION_ID)
    answer = decide_adoption(adopt(epoch, *((s, 3) for s in new), caught_up=False, cid=cid),
                             book.epoch_of(0, SESSION_ID), live, book.parked(0, SESSION_ID, epoch), NOW)  # fmt: skip
    assert isinstance(answer, EpochAdopted), answer
    assert book.adopt(0, answer, at)
    return answer


def test_the_book_follows_the_served_epoch_parks_the_left_heads_and_ignores_records_read_twice() -> None:
    book = HeadBook()
    key = f"{SESSION_ID}\x1f"
    assert book.record(0, summary(1, 3, "live v1"), 3, at=10)
    assert not book.record(0, summary(2, 3, "epoch 1 elsewhere", epoch=1), 3)  # not the served epoch
    switch = _switch(book, 1, 12, summary(1, 3, "新 v1", epoch=1))
    assert book.epoch_of(0, SESSION_ID) == 1 and book.head(0, key).summary == "新 v1"  # type: ignore[union-attr]
    assert book.record(0, summary(2, 5, "新 v2", epoch=1), 5, at=13)
    # read again from an earlier offset: the old line's summary, the switch itself, change nothing
    assert not book.record(0, summary(2, 5, "live v2", epoch=0), 5, at=11)
    assert not book.adopt(0, switch, 12)
    assert book.head(0, key).summary == "新 v2"  # type: ignore[union-attr]
    assert (book.parked(0, SESSION_ID, 0) or {})[""].summary == "live v1"
    # back to epoch 0: its parked head is the head again, epoch 1's is parked in turn
    _switch(book, 0, 20, cid="c2")
    assert book.head(0, key).summary == "live v1" and book.epoch_of(0, SESSION_ID) == 0  # type: ignore[union-attr]
    assert (book.parked(0, SESSION_ID, 1) or {})[""].version == 2
    assert book.record(0, summary(2, 6, "live v2 after the switch back"), 6, at=21)
    assert not book.record(0, summary(3, 7, "epoch 1, before the switch back", epoch=1), 7, at=14)


# -- the runtime: the next pass rolls forward the adopted line ---------------------------------------------------


class BookLedger(SummaryLedger):
    """The real ledger over its :class:`HeadBook`, without Kafka (own writes only, or :meth:`absorb`)."""

    def __init__(self) -> None:
        super().__init__(KafkaSettings(), "sum")

    async def ready(self, partition: int) -> None:
        return None


class Sent:
    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    async def __call__(self, topic: str, key: bytes, value: bytes, partition: int, headers: object) -> None:
        self.records.append(json.loads(value))

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("type") == kind]


def runtime(model: ScriptedModel) -> tuple[WorkerRuntime, Sent]:
    settings = Settings()
    summarizer = build_summarizer(settings, app_name=SESSION.app_name, model=model)

    def summarizer_for(app: str) -> SummarizerLike:
        return summarizer

    rt = WorkerRuntime(settings, Topics("ev", "jobs", "sum", "dl"),
                       TrackHandler(policies_from_settings(settings.summary, settings.llm.model)),
                       summarizer_for, backoff=Backoff(0.01, 0.02))  # fmt: skip
    ledger = BookLedger()
    rt.ledger = ledger
    rt.summarize = SummarizeHandler(ledger, MemoryEventLog(EVENTS), summarizer_for)
    rt.cache_ready.set()
    rt.send = sent = Sent()
    return rt, sent


def next_job(upto: int, after: int, from_version: int) -> SummaryJob:
    """A job decided after the summary at ``after`` (what the track side emits)."""
    boundary = SummaryBoundary(cutoff_at=EVENTS[after].timestamp, last_event_id=EVENTS[after].event_id)
    return job(upto, from_version=from_version).model_copy(update={"previous_boundary": boundary})


def sent_text(request: ChatRequest) -> str:
    return "\n".join(str(m.get("content") or "") for m in request.messages)


async def test_after_a_switch_the_next_pass_rolls_forward_the_adopted_epochs_head() -> None:
    model = ScriptedModel("旧摘要LIVE1", "续写NEW2", context_window=100_000)
    rt, sent = runtime(model)
    await rt.run_job(job(3), COORDS, b"k", None)
    assert [(s["epoch"], s["version"]) for s in sent.of("summary")] == [(0, 1)]
    await rt.run_adoption(adopt(1, (summary(1, 3, "新摘要NEW1", epoch=1), 3)), COORDS, b"k")
    [switch] = sent.of("epoch_adopted")
    assert switch["replaced"][0]["summary"]["summary"] == "旧摘要LIVE1"
    await rt.run_job(next_job(7, 3, 1), COORDS, b"k", None)
    second = model.requests[-1]
    assert "新摘要NEW1" in sent_text(second) and "旧摘要LIVE1" not in sent_text(second)
    last = sent.of("summary")[-1]
    assert (last["epoch"], last["version"], last["summary"]) == (1, 2, "续写NEW2")
    assert last["previous_boundary"]["last_event_id"] == EVENTS[3].event_id


async def test_a_pass_at_the_model_when_the_switch_lands_runs_again_on_the_adopted_head() -> None:
    model = ScriptedModel("v1", "built on the old line", "built on the new line", context_window=100_000)
    rt, sent = runtime(model)
    await rt.run_job(job(3), COORDS, b"k", None)
    at_model, release = asyncio.Event(), asyncio.Event()
    handle = rt.summarize.handle

    async def gated(j: SummaryJob, partition: int, *slot: Any) -> JobResult:
        result = await handle(j, partition, *slot)
        if not at_model.is_set():
            at_model.set()
            await release.wait()
        return result

    rt.summarize.handle = gated  # type: ignore[method-assign,assignment]
    pass_ = asyncio.ensure_future(rt.run_job(next_job(7, 3, 1), COORDS, b"k", None))
    await at_model.wait()
    await rt.run_adoption(adopt(1, (summary(1, 3, "NEWHEAD", epoch=1), 3)), COORDS, b"k")
    release.set()
    await asyncio.wait_for(pass_, 5)
    assert len(model.requests) == 3 and "NEWHEAD" in sent_text(model.requests[-1])
    summaries = sent.of("summary")
    assert [(s["epoch"], s["version"], s["summary"]) for s in summaries] == [
        (0, 1, "v1"), (1, 2, "built on the new line")]  # fmt: skip


async def test_a_refused_switch_is_answered_and_changes_nothing_and_a_command_delivered_again_is_not_applied() -> None:
    model = ScriptedModel("v1", context_window=100_000)
    rt, sent = runtime(model)
    await rt.run_job(job(5), COORDS, b"k", None)
    await rt.run_adoption(adopt(1, (summary(1, 3, "behind", epoch=1), 3)), COORDS, b"k")
    [refusal] = sent.of("summary_failure")
    assert refusal["error_class"] == EPOCH_NOT_CAUGHT_UP and refusal["reply_to"] == "r-c1"
    assert rt.ledger.epoch_of(0, SESSION_ID) == 0
    caught_up = adopt(1, (summary(1, 5, "caught up", epoch=1), 5), cid="c2")
    await rt.run_adoption(caught_up, COORDS, b"k")
    await rt.run_adoption(caught_up, COORDS, b"k")
    assert len(sent.of("epoch_adopted")) == 1 and rt.ledger.epoch_of(0, SESSION_ID) == 1


async def test_a_forced_switch_to_a_head_behind_the_live_line_loses_no_event() -> None:
    # The live line covers e0..e5; the epoch only e0..e3. Its next pass must take e4 and e5 again
    # (the live summary that held them is not the previous summary any more), then e6, e7.
    model = ScriptedModel("LIVE to e5", "NEW to e7", context_window=100_000)
    rt, sent = runtime(model)
    await rt.run_job(job(5), COORDS, b"k", None)
    await rt.run_adoption(adopt(1, (summary(1, 3, "NEW to e3", epoch=1), 3), caught_up=False), COORDS, b"k")
    [switch] = sent.of("epoch_adopted")
    assert switch["caught_up"] is False
    await rt.run_job(next_job(7, 5, 1), COORDS, b"k", None)
    text = sent_text(model.requests[-1])
    assert "NEW to e3" in text and "LIVE to e5" not in text
    assert all(f"message {i} about topic {i}" in text for i in range(4, 8)), text
    assert not any(f"message {i} about topic {i}" in text for i in range(0, 4))
    last = sent.of("summary")[-1]
    assert (last["epoch"], last["version"], last["boundary"]["last_event_id"]) == (1, 2, EVENTS[7].event_id)


async def test_the_worker_refuses_a_switch_to_a_chain_that_starts_after_the_sessions_first_record() -> None:
    model = ScriptedModel("LIVE to e5", context_window=100_000)
    rt, sent = runtime(model)
    first: dict[str, int | None] = {"offset": 0}
    rt.tracked = lambda key: TrackedKey(new_state(*SESSION, ""), first["offset"], 0)
    await rt.run_job(job(5), COORDS, b"k", None)
    assert sent.of("summary")[-1]["chain_from_offset"] == 0
    late = adopt(1, (summary(1, 5, "from e2 on", epoch=1, chain_from=2), 5), caught_up=False)
    await rt.run_adoption(late, COORDS, b"k")
    [refusal] = sent.of("summary_failure")
    assert refusal["error_class"] == EPOCH_MISSING_HISTORY and refusal["reply_to"] == "r-c1"
    assert rt.ledger.epoch_of(0, SESSION_ID) == 0 and not sent.of("epoch_adopted")
    # the session's first record is offset 2 (a deletion before it): the same chain is the whole session's
    first["offset"] = 2
    await rt.run_adoption(late.model_copy(update={"command_id": "c2", "reply_to": "r-c2"}), COORDS, b"k")
    assert len(sent.of("epoch_adopted")) == 1 and rt.ledger.epoch_of(0, SESSION_ID) == 1
