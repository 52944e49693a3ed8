"""Sync requests across epoch switches: what a waiting request is answered with once its session switched.

A ``join`` job (a ``summarize_sync`` waiting for the key's jobs) is answered from
the ledger: the latest summary of the epoch the session is served from, or the
given-up failure of the job it waited for. A switch replaces the session's heads,
and with them that news: a failure of the line it left answers no request after
it, the fold of the log agrees however the records were read, and an answer
decided just before a switch is decided again after it (the oracle: the epoch
and text of the summary the reply names, never the line the session left).
"""

from __future__ import annotations

import asyncio
from typing import Any

from schemas import EpochAdopted, SessionSummary, SummaryFailure, SummaryJob, SummaryReply
from streams.app.heads import HeadBook
from streams.app.ledger import SummaryLedger
from streams.app.summarize import JobResult, SummarizeHandler
from streams.app.tracked import table_key
from streams.summarizer import SummarizerLike
from tests.unit.app.test_epochs import COORDS, SESSION_ID, BookLedger, adopt, runtime, summary
from tests.unit.app.test_ledger_replies import ReadBack, failure
from tests.unit.app.test_summarize_handler import EVENTS, MemoryEventLog, job
from tests.unit.summarizer.helpers import SESSION, ScriptedModel

KEY = table_key(*SESSION, "")
BRANCH = table_key(*SESSION, "app/b")


def switch(epoch: int, previous: int, *heads: tuple[SessionSummary, int], cid: str = "c1") -> EpochAdopted:
    command = adopt(epoch, *heads, caught_up=False, cid=cid)
    return EpochAdopted(
        app_name=SESSION.app_name, user_id=SESSION.user_id, session_id=SESSION.session_id, epoch=epoch,
        previous_epoch=previous, heads=command.heads, command_id=cid, created_at=summary(1, 1, "x").created_at,
    )  # fmt: skip


def gave_up(job_id: str, key: str = "", upto: int = 7) -> SummaryFailure:
    return failure(job_id).model_copy(update={"filter_key": key, "upto_event_id": EVENTS[upto].event_id})


def no_model(app_name: str) -> SummarizerLike:
    raise AssertionError("a join job calls no model")


LOG: list[tuple[int, SessionSummary | SummaryFailure | EpochAdopted]] = [
    (10, summary(1, 3, "live v1")),
    (11, gave_up("j-1-7")),
    (12, gave_up("j-b-7", key="app/b")),
    (13, switch(1, 0, (summary(1, 3, "epoch one v1", epoch=1), 3))),
    (14, gave_up("j-e1-6", upto=6)),  # a job of the adopted line that failed after the switch
]


def fold(ledger: SummaryLedger, records: list[tuple[int, SessionSummary | SummaryFailure | EpochAdopted]]) -> None:
    for offset, record in records:
        ledger.absorb(0, record.model_dump_json().encode(), None, offset)


def failures(ledger: SummaryLedger) -> tuple[str | None, str | None]:
    found = ledger.failure(0, KEY), ledger.failure(0, BRANCH)
    return found[0].job_id if found[0] else None, found[1].job_id if found[1] else None


def test_a_switch_clears_the_failures_of_the_line_the_session_left_and_every_fold_agrees() -> None:
    fresh = ReadBack()
    fold(fresh, LOG[:3])
    assert failures(fresh) == ("j-1-7", "j-b-7")
    fold(fresh, LOG[3:])
    assert failures(fresh) == ("j-e1-6", None)
    live = ReadBack()  # this worker's own writes, with their offsets, then a catch-up reading them again
    for offset, record in LOG:
        if isinstance(record, EpochAdopted):
            live.adopt(0, record, offset)
        elif isinstance(record, SummaryFailure):
            live.record_failure(0, record, offset)
        else:
            live.record(0, record, 3, offset)
    fold(live, LOG)
    assert failures(live) == failures(fresh)
    blind = ReadBack()  # own writes whose sends named no offset (as test doubles do), then read back
    for _, record in LOG:
        if isinstance(record, EpochAdopted):
            blind.adopt(0, record, None)
        elif isinstance(record, SummaryFailure):
            blind.record_failure(0, record)
        else:
            blind.record(0, record, 3)
    fold(blind, LOG)
    assert failures(blind) == failures(fresh)


def test_a_summary_of_a_line_the_session_left_clears_no_failure_but_one_of_the_served_line_does() -> None:
    book = HeadBook()
    book.adopt(0, switch(1, 0, (summary(1, 3, "epoch one", epoch=1), 3)), 20)
    assert book.record_failure(0, gave_up("j-e1-7"), 21)
    assert not book.record(0, summary(2, 7, "a late write of the left line", epoch=0), 7, 22)
    assert book.failure(0, KEY) is not None
    assert not book.record_failure(0, gave_up("j-old", upto=5), 19)  # read again, from before the switch
    assert book.failure(0, KEY) is not None and book.failure(0, KEY).job_id == "j-e1-7"  # type: ignore[union-attr]
    book.record(0, summary(2, 7, "epoch one v2", epoch=1), 7, 23)
    assert book.failure(0, KEY) is None


async def test_a_join_after_a_forced_switch_is_answered_with_the_adopted_head_not_the_left_lines_failure() -> None:
    ledger = ReadBack()
    fold(ledger, LOG[:2])  # the live line: v1 at e3, its job for e7 given up
    waiting = job(7, from_version=1, reply_to="corr", origin="join")
    before = await SummarizeHandler(ledger, MemoryEventLog(EVENTS), no_model).handle(waiting, 0)
    assert isinstance(before.record, SummaryFailure) and "j-1-7" in before.record.reason
    fold(ledger, LOG[3:4])  # switched to epoch 1, behind e7
    answer = await SummarizeHandler(ledger, MemoryEventLog(EVENTS), no_model).handle(waiting, 0)
    assert isinstance(answer.record, SummaryReply) and answer.served_epoch == 1
    assert (answer.record.summary.epoch, answer.record.summary.summary) == (1, "epoch one v1")


async def test_a_sync_job_decided_on_the_left_line_whose_target_the_adopted_head_covers_gets_that_head() -> None:
    # Live line at v5 when the job was decided (from_version=5); the adopted epoch's head is v1 at e7:
    # versions of two lines are not comparable, the covering head answers the request.
    ledger = BookLedger()
    ledger.adopt(0, switch(1, 0, (summary(1, 7, "epoch one to e7", epoch=1), 7)), 30)
    model = ScriptedModel(context_window=100_000)
    h = SummarizeHandler(ledger, MemoryEventLog(EVENTS), no_model)
    for from_version in (5, 1):  # above the adopted head's version, and equal to it by chance
        answer = await h.handle(job(7, from_version=from_version, reply_to=f"corr-{from_version}"), 0)
        assert answer.outcome == "replied" and isinstance(answer.record, SummaryReply), answer
        assert (answer.record.summary.epoch, answer.record.summary.summary) == (1, "epoch one to e7")
    unasked = await h.handle(job(7, from_version=5), 0)
    assert unasked.outcome == "stale" and not model.requests


async def test_a_join_answered_while_a_switch_lands_names_the_adopted_epochs_head() -> None:
    model = ScriptedModel("LIVE to e5", context_window=100_000)
    rt, sent = runtime(model)
    await rt.run_job(job(5), COORDS, b"k", None)
    decided, release = asyncio.Event(), asyncio.Event()
    handle = rt.summarize.handle

    async def gated(j: SummaryJob, partition: int, *slot: Any) -> JobResult:
        result = await handle(j, partition, *slot)
        if not decided.is_set():
            decided.set()
            await release.wait()
        return result

    rt.summarize.handle = gated  # type: ignore[method-assign]
    waiting = asyncio.ensure_future(rt.run_job(job(5, from_version=1, reply_to="corr", origin="join"), COORDS, b"k",
                                               None))  # fmt: skip
    await decided.wait()  # the answer is decided on epoch 0 ...
    await rt.run_adoption(adopt(1, (summary(1, 5, "NEW to e5", epoch=1), 5)), COORDS, b"k")  # ... the switch lands
    release.set()
    await asyncio.wait_for(waiting, 5)
    kinds = [r["type"] for r in sent.records]
    assert kinds == ["summary", "epoch_adopted", "summary_reply"], kinds
    reply = sent.of("summary_reply")[0]
    assert (reply["summary"]["epoch"], reply["summary"]["summary"], reply["reply_to"]) == (1, "NEW to e5", "corr")
    assert rt.ledger.epoch_of(0, SESSION_ID) == 1
