"""The ledger's fold of the summaries topic, as a join job reads it: heads and given-up failures.

A ``join`` job (a sync request waiting for the key's jobs) is answered from
the ledger alone. The ledger folds the topic in log order — this worker's own
writes as it makes them, the records read back by a new worker after a
restart — so a re-delivered join job gets the same answer from either.
"""

from __future__ import annotations

from datetime import UTC, datetime

from schemas import SessionSummary, SummaryBoundary, SummaryFailure, SummaryReply
from schemas.settings import KafkaSettings
from schemas.summaries import SummaryReport, TriggerReport
from streams.app.ledger import SummaryLedger
from streams.app.summarize import SummarizeHandler
from streams.app.tracked import table_key
from streams.summarizer import SummarizerLike
from tests.unit.app.test_summarize_handler import EVENTS, MemoryEventLog, job
from tests.unit.summarizer.helpers import SESSION

T = datetime(2026, 1, 1, tzinfo=UTC)
KEY = table_key(SESSION.app_name, SESSION.user_id, SESSION.session_id, "")


class ReadBack(SummaryLedger):
    """The real ledger with no broker: its records come through :meth:`absorb` (as catch-up reads them)."""

    def __init__(self) -> None:
        super().__init__(KafkaSettings(), "summaries")

    async def ready(self, partition: int) -> None:
        return None


def summary(version: int, upto: int, job_id: str) -> SessionSummary:
    return SessionSummary(
        app_name=SESSION.app_name, user_id=SESSION.user_id, session_id=SESSION.session_id,
        summary=f"v{version} 摘要", version=version,
        boundary=SummaryBoundary(cutoff_at=EVENTS[upto].timestamp, last_event_id=EVENTS[upto].event_id),
        model="m", prompt_version="p", created_at=T, report=SummaryReport(trigger=TriggerReport(name="always")),
        job_id=job_id,
    )  # fmt: skip


def failure(job_id: str, *, gave_up: bool = True, error_class: str = "JobTimeoutError") -> SummaryFailure:
    return SummaryFailure(
        app_name=SESSION.app_name, user_id=SESSION.user_id, session_id=SESSION.session_id, job_id=job_id,
        error_class=error_class, reason="ran past job_timeout_s", created_at=T, gave_up=gave_up,
    )  # fmt: skip


def no_model(app_name: str) -> SummarizerLike:
    raise AssertionError("a join job calls no model")


def read_back(*records: SessionSummary | SummaryFailure) -> ReadBack:
    ledger = ReadBack()
    for record in records:
        ledger.absorb(0, record.model_dump_json().encode(), None)
    return ledger


def test_a_failure_is_the_keys_news_until_a_summary_comes_after_it() -> None:
    ledger = read_back(summary(1, 1, "j1"), failure("j2"))
    found = ledger.failure(0, KEY)
    assert found is not None and found.job_id == "j2"
    later = read_back(summary(1, 1, "j1"), failure("j2"), summary(2, 3, "j2"))
    assert later.failure(0, KEY) is None
    head = later.head(0, KEY)
    assert head is not None and head.version == 2 and head.record.summary == "v2 摘要"


def test_answers_and_skips_are_no_failure_of_the_key() -> None:
    ledger = read_back(failure("command:c1", gave_up=False, error_class="NothingToSummarize"),
                       failure("j1", gave_up=False, error_class="SummarySkipped"))  # fmt: skip
    assert ledger.failure(0, KEY) is None


def test_reading_its_own_writes_again_ends_where_writing_them_did() -> None:
    """After a rebalance the catch-up re-reads records this worker wrote (and already applied)."""
    live = ReadBack()
    live.record_failure(0, failure("j2"))
    live.record(0, summary(2, 3, "j2"), 3)
    for record in (failure("j2"), summary(2, 3, "j2")):  # read again, in log order
        live.absorb(0, record.model_dump_json().encode(), None)
    assert live.failure(0, KEY) is None


async def test_a_join_redelivered_to_a_new_worker_gets_the_answer_the_old_one_would_give() -> None:
    records = (summary(1, 1, "j1"), failure("j2"))
    old = ReadBack()
    old.record(0, records[0], 1)
    old.record_failure(0, records[1])
    new = read_back(*records)  # a fresh worker: the summaries topic read from the start
    waiting = job(3, reply_to="corr", origin="join")
    answers = []
    for ledger in (old, new):
        result = await SummarizeHandler(ledger, MemoryEventLog(EVENTS), no_model).handle(waiting, 0)
        assert isinstance(result.record, SummaryFailure)
        answers.append((result.record.error_class, result.record.reason, result.record.reply_to))
    assert answers[0] == answers[1] and answers[0][0] == "JobTimeoutError" and "j2" in answers[0][1]
    covered = read_back(*records, summary(2, 3, "j2"))
    result = await SummarizeHandler(covered, MemoryEventLog(EVENTS), no_model).handle(waiting, 0)
    assert isinstance(result.record, SummaryReply) and result.record.summary.version == 2
