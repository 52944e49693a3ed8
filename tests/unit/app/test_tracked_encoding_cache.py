"""The changelog encoder's cache of a key's pending index: the bytes are those of a fresh encoding.

``TrackedKey.to_bytes`` keeps the encoding of the pending entries written so far on the state
and encodes only the new ones. The oracle is the same state encoded without a cache (a
``copy()`` carries none): after every step of a random life — events (CJK text, branch keys,
tool calls), jobs answered or given up, sync requests, deletes, redelivery, restarts from the
changelog bytes — both must be equal byte for byte, and read back to the same state.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import (
    DeleteSession,
    SessionEvent,
    SessionSummary,
    SummarizeSync,
    SummaryBoundary,
    SummaryFailure,
    SummaryJob,
    SummaryReport,
    TriggerReport,
)
from streams.app.coordinates import Coordinates
from streams.app.tracked import CACHED_FROM, TrackedKey
from tests.unit.app.test_track_handler import T0, handler

Step = tuple[str, int]


def event(n: int, kind: int) -> SessionEvent:
    role = ("user", "assistant", "assistant")[kind % 3]
    return SessionEvent.model_validate({
        "app_name": "a", "user_id": "u", "session_id": "s", "event_id": f"事件{n}",
        "timestamp": (T0 + timedelta(seconds=n)).isoformat(), "request_id": f"r{n // 3}",
        "author": "user" if role == "user" else "bot", "filter_key": "a/分支" if kind % 4 == 3 else "",
        "message": {"role": role, "content": f"第{n}条消息：总结之前的内容"},
    })  # fmt: skip


def summary(job: SummaryJob, version: int) -> SessionSummary:
    return SessionSummary(
        app_name="a", user_id="u", session_id="s", filter_key=job.filter_key, summary=f"v{version}",
        version=version, boundary=SummaryBoundary(cutoff_at=job.upto.cutoff_at, last_event_id=job.upto.last_event_id),
        model="m", prompt_version="p", created_at=T0,
        report=SummaryReport(trigger=TriggerReport(name="event_threshold")), job_id=job.job_id,
    )  # fmt: skip


def failure(job: SummaryJob) -> SummaryFailure:
    return SummaryFailure(
        app_name="a", user_id="u", session_id="s", filter_key=job.filter_key, job_id=job.job_id,
        error_class="ServerError", reason="500", created_at=T0, gave_up=True,
    )  # fmt: skip


def check(table: dict[str, TrackedKey]) -> None:
    for value in table.values():
        cached = value.to_bytes()
        fresh = TrackedKey(value.state.copy(), value.first_offset, value.partition, value.emitted_wall).to_bytes()
        assert cached == fresh
        assert TrackedKey.from_bytes(cached).state == value.state


steps = st.lists(
    st.tuples(st.sampled_from(["event"] * 6 + ["answer", "fail", "sync", "delete", "again", "restart"]),
              st.integers(0, 11)),
    min_size=1, max_size=120,
)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(life=steps, threshold=st.integers(3, 30))
def test_cached_encoding_equals_a_fresh_one_at_every_step(life: list[Step], threshold: int) -> None:
    h = handler(threshold)
    table: dict[str, TrackedKey] = {}
    log: list[Any] = []
    open_jobs: list[SummaryJob] = []
    versions: dict[str, int] = {}
    for op, n in life:
        if op in ("event", "sync", "delete"):
            offset = len(log)
            if op == "event":
                record: Any = event(offset, n)
            elif op == "sync":
                record = SummarizeSync(app_name="a", user_id="u", session_id="s", command_id=f"c{offset}",
                                       reply_to=f"c{offset}", force=n % 2 == 0)  # fmt: skip
            else:
                record = DeleteSession(app_name="a", user_id="u", session_id="s", command_id=f"d{offset}")
            log.append(record)
            open_jobs += [
                j for j in h.on_record(record, Coordinates("ev", 0, offset), table).jobs if j.origin != "join"
            ]
        elif op in ("answer", "fail") and open_jobs:
            job = open_jobs.pop(0)
            if op == "answer":
                versions[job.filter_key] = versions.get(job.filter_key, 0) + 1
                h.on_summary_record(summary(job, versions[job.filter_key]), table)
            else:
                h.on_summary_record(failure(job), table)
        elif op == "again" and log:
            offset = max(0, len(log) - 1 - n)
            h.on_record(log[offset], Coordinates("ev", 0, offset), table)
        elif op == "restart":
            table = {k: TrackedKey.from_bytes(v.to_bytes()) for k, v in table.items()}
        check(table)


def test_a_long_pending_index_is_encoded_once_per_entry() -> None:
    """The cache is used (not only correct): after a write, the next one encodes only the new entry."""
    h = handler(10**6)
    table: dict[str, TrackedKey] = {}
    for i in range(CACHED_FROM + 5):
        h.on_record(event(i, i), Coordinates("ev", 0, i), table)
        for value in table.values():
            value.to_bytes()
    state = next(v for k, v in table.items() if k.endswith("\x1f")).state
    assert state.encoded is not None and state.encoded[0] is state.pending
    assert state.encoded[1] == len(state.pending)
    state.pending.clear()  # a list emptied and grown again: the cache must not be trusted
    for i in range(CACHED_FROM + 10, 2 * CACHED_FROM + 30):  # longer than the cached list was: the length check passes
        h.on_record(event(i, 1), Coordinates("ev", 0, i), table)
    for value in table.values():  # (its counters no longer match: only the bytes are compared)
        fresh = TrackedKey(value.state.copy(), value.first_offset, value.partition, value.emitted_wall)
        assert value.to_bytes() == fresh.to_bytes()
