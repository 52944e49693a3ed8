"""A ``delete_session`` seen while a job of the session runs: the deleted events reach no model.

The worker's runtime with its real pool and model slots, an in-memory ledger and log, and the
track table as a dict. A job decided before the deletion — waiting for a model slot, with its
call in progress, or only delivered after the deletion (a restart) — sends no request once the
deletion is in the table, and publishes no summary; a request waiting for it is answered.
"""

from __future__ import annotations

import asyncio
from typing import Any

from schemas import SummaryFailure, SummaryJob
from streams.app.runtime import WorkerRuntime
from streams.app.summarize import decided_before, deleted_since
from streams.app.tracked import TrackedKey, table_key
from streams.rules.filter_keys import FULL_SESSION
from streams.rules.trigger_state import new_state
from tests.unit.app.test_failure_policy import Sent, runtime
from tests.unit.app.test_model_slots import HeldModel, of_key, submit, summaries, until
from tests.unit.app.test_summarize_handler import job
from tests.unit.summarizer.helpers import SESSION

FULL = table_key(*SESSION, FULL_SESSION)


def entry(first_offset: int | None) -> TrackedKey:
    return TrackedKey(new_state(*SESSION, FULL_SESSION), first_offset, 0)


def with_table(model: HeldModel, **summary: Any) -> tuple[WorkerRuntime, Sent, dict[str, TrackedKey]]:
    rt, sent, _ = runtime(model, job_timeout_s=30, **summary)
    table = {FULL: entry(0)}  # the session's first record at offset 0, as the jobs were decided
    rt.tracked = table.get
    return rt, sent, table


DELETED_AT = 1
"""The ``delete_session``'s offset: after the jobs' ``events_from_offset`` (0)."""


def delete(rt: WorkerRuntime, table: dict[str, TrackedKey], *, notice: bool = True) -> None:
    """What the track agent does: the table entry reset (``TrackHandler._on_delete``), then the notice."""
    table[FULL] = entry(None)
    if notice:
        rt.sessions_deleted([(SESSION, DELETED_AT)])


def sent_texts(model: HeldModel) -> list[str]:
    return [str(m.get("content")) for r in model.requests for m in r.messages]


def test_a_job_is_of_a_deleted_session_when_the_tables_first_offset_moved_past_its_own() -> None:
    j = job(3).model_copy(update={"events_from_offset": 10})
    assert not deleted_since(j, entry(10))
    assert deleted_since(j, entry(None))  # deleted, no event since
    assert deleted_since(j, entry(25))  # deleted, the session started again
    assert not deleted_since(j, None)  # not known here
    assert not deleted_since(j.model_copy(update={"events_from_offset": None}), entry(None))
    assert not deleted_since(j.model_copy(update={"origin": "join"}), entry(None))  # reads no events


async def test_a_job_waiting_for_a_model_slot_at_the_deletion_never_sends_its_request() -> None:
    model = HeldModel()
    rt, sent, table = with_table(model, async_summary_num=1)
    await rt.model_slots.acquire()  # another session's call holds the only slot
    await submit(rt, "mine", job(3), 1)
    await submit(rt, "branch", of_key(job(3), "app/branch"), 2)
    await asyncio.sleep(0.05)
    assert model.entered == 0  # both wait for the slot
    delete(rt, table)
    rt.model_slots.release()
    await until(lambda: len(rt.pool) == 0)
    assert model.entered == 0, sent_texts(model)
    assert sent.records == []


async def test_a_call_in_progress_at_the_deletion_is_cancelled_and_publishes_nothing() -> None:
    model = HeldModel()
    model.hold = True
    rt, sent, table = with_table(model)
    await submit(rt, "mine", job(3), 1)
    await until(lambda: model.active == 1)
    delete(rt, table)
    await until(lambda: len(rt.pool) == 0, timeout=1.0)  # not when the model answers: at the deletion
    assert model.active == 0 and model.entered == 1
    model.release.set()
    await asyncio.sleep(0.05)
    assert sent.records == []  # no summary, no failure, no dead letter


async def test_a_job_delivered_after_the_deletion_is_in_the_table_sends_nothing() -> None:
    # A restart: the deletion was folded (its table entry recovered), no notice reaches the job.
    model = HeldModel()
    rt, sent, table = with_table(model)
    delete(rt, table, notice=False)
    await submit(rt, "mine", job(3), 1)
    await until(lambda: len(rt.pool) == 0)
    assert model.entered == 0 and sent.records == []


async def test_a_request_waiting_for_a_job_of_a_deleted_session_is_answered() -> None:
    model = HeldModel()
    model.hold = True
    rt, sent, table = with_table(model)
    await submit(rt, "mine", job(3, reply_to="req-1"), 1)
    await until(lambda: model.active == 1)
    delete(rt, table)
    await until(lambda: len(rt.pool) == 0, timeout=1.0)
    [answer] = [SummaryFailure.model_validate(r) for r in sent.on("sum")]
    assert answer.reply_to == "req-1" and answer.error_class == "SessionDeletedError" and not answer.gave_up
    assert sent.on("dl") == []


async def test_a_job_decided_after_the_deletion_runs() -> None:
    model = HeldModel()
    rt, sent, table = with_table(model)
    delete(rt, table)
    table[FULL] = entry(2)  # the session started again at offset 2
    after: SummaryJob = job(5).model_copy(update={"events_from_offset": 2})
    await submit(rt, "mine", after, 1)
    await until(lambda: len(summaries(sent)) == 1)
    assert model.entered == 1


def test_a_job_is_decided_before_a_deletion_when_its_session_began_before_the_deletions_offset() -> None:
    j = job(3).model_copy(update={"events_from_offset": 10})
    assert decided_before(j, 11)
    assert not decided_before(j, 10) and not decided_before(j, 3)  # decided after it (a deletion delivered again)
    assert not decided_before(j.model_copy(update={"events_from_offset": None}), 11)  # not known here
    assert not decided_before(j.model_copy(update={"origin": "join"}), 11)  # reads no events


async def test_a_call_in_progress_is_cancelled_even_when_the_table_does_not_answer_for_the_session() -> None:
    # RocksDB: the track agent folds a batch of several partitions, and its store answers only for the
    # partition written last; for this session the table lookup finds nothing when the notice comes.
    model = HeldModel()
    model.hold = True
    rt, sent, _ = with_table(model)
    rt.tracked = lambda _key: None
    await submit(rt, "mine", job(3), 1)
    await until(lambda: model.active == 1)
    assert rt.sessions_deleted([(SESSION, DELETED_AT)]) == 1
    await until(lambda: len(rt.pool) == 0, timeout=1.0)
    assert model.active == 0 and model.entered == 1
    model.release.set()
    await asyncio.sleep(0.05)
    assert sent.records == []  # no summary, no failure, no dead letter


async def test_a_deletion_delivered_again_does_not_cancel_a_job_decided_after_it() -> None:
    model = HeldModel()
    model.hold = True
    rt, sent, table = with_table(model)
    table[FULL] = entry(DELETED_AT + 1)  # the session started again after the deletion
    after: SummaryJob = job(5).model_copy(update={"events_from_offset": DELETED_AT + 1})
    await submit(rt, "mine", after, 1)
    await until(lambda: model.active == 1)
    assert rt.sessions_deleted([(SESSION, DELETED_AT)]) == 0
    model.release.set()
    await until(lambda: len(summaries(sent)) == 1)
