"""The client: malformed summaries records are skipped; a sync request gets its own answer (or None)."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from schemas import SessionKey, SessionSummary, SummarizeSync, SummaryBoundary, SummaryFailure, SummaryReply
from schemas.settings import Settings
from schemas.summaries import SummaryReport, TriggerReport
from streams.client import (
    DistillClient,
    SummaryUnavailableError,
    _first_reply,
    _records,
    encode_record,
    is_nothing_to_summarize,
)
from streams.summarizer import SummarySkipped

SESSION = SessionKey("app", "u1", "s1")
T = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class Msg:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


class FakeConsumer:
    def __init__(self, msgs: list[Msg]) -> None:
        self.msgs = msgs

    async def __aiter__(self) -> AsyncIterator[Msg]:  # type: ignore[misc]
        for m in self.msgs:
            yield m


def summary(reply_to: str | None = None, filter_key: str = "") -> bytes:
    return SessionSummary(
        app_name="app", user_id="u1", session_id="s1", filter_key=filter_key, summary="text", version=1,
        boundary=SummaryBoundary(cutoff_at=T, last_event_id="e1"), model="m", prompt_version="p",
        created_at=T, job_id="j", reply_to=reply_to, report=SummaryReport(trigger=TriggerReport(name="force")),
    ).model_dump_json().encode()  # fmt: skip


BAD = [b"not json", b"[1, 2]", b'{"type": "summary", "version": "x"}', b"\xff\xfe"]


async def test_malformed_records_are_skipped_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    key = SESSION.kafka_key()
    msgs = [Msg("sum", 0, i, key, v) for i, v in enumerate(BAD)] + [Msg("sum", 0, 9, key, summary())]
    caplog.set_level(logging.WARNING, logger="streams.client")
    got = [r async for r in _records(FakeConsumer(msgs), SESSION, True)]  # type: ignore[arg-type]
    assert len(got) == 1 and got[0].summary == "text"
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [(r.__dict__["partition"], r.__dict__["offset"]) for r in warned] == [(0, i) for i in range(len(BAD))]
    assert all(r.__dict__["topic"] == "sum" for r in warned)


async def test_a_malformed_record_does_not_end_a_sync_request() -> None:
    key = SESSION.kafka_key()
    msgs: list[Any] = [Msg("sum", 1, 0, key, b"{broken"), Msg("sum", 1, 1, key, summary("corr"))]
    command = sync_command("")
    reply = await _first_reply(_records(FakeConsumer(msgs), SESSION, True), command)  # type: ignore[arg-type]
    assert reply.reply_to == "corr"


def sync_command(filter_key: str = "br/x") -> SummarizeSync:
    return SummarizeSync(app_name="app", user_id="u1", session_id="s1", command_id="corr", reply_to="corr",
                         filter_key=filter_key)  # fmt: skip


def failure(error_class: str, filter_key: str = "br/x", session_id: str = "s1", reply_to: str = "corr") -> bytes:
    return SummaryFailure(
        app_name="app", user_id="u1", session_id=session_id, filter_key=filter_key, job_id="j", reply_to=reply_to,
        error_class=error_class, reason="why", created_at=T,
    ).model_dump_json().encode()  # fmt: skip


async def test_a_sync_request_is_answered_only_by_a_record_for_its_key_and_session() -> None:
    key = SESSION.kafka_key()
    other_key = summary("corr", filter_key="")  # a full-session record with the same correlation id
    other_session = failure("RuntimeError", session_id="s2")
    mine = summary("corr", filter_key="br/x")
    msgs: list[Any] = [Msg("sum", 0, i, key, v) for i, v in enumerate([other_key, other_session, mine])]
    reply = await _first_reply(_records(FakeConsumer(msgs), None, True), sync_command())  # type: ignore[arg-type]
    assert isinstance(reply, SessionSummary) and reply.filter_key == "br/x"


async def test_a_sessions_records_are_found_by_their_ids_whatever_their_key() -> None:
    """A summary carries its session's own record key, which need not be the canonical one."""
    msgs: list[Any] = [Msg("sum", 0, 0, b"app:u1:s1", summary()), Msg("sum", 0, 1, b"s1", failure("X")),
                       Msg("sum", 0, 2, SESSION.kafka_key(), failure("Y", session_id="s2"))]  # fmt: skip
    got = [r async for r in _records(FakeConsumer(msgs), SESSION, True)]  # type: ignore[arg-type]
    assert [type(r).__name__ for r in got] == ["SessionSummary", "SummaryFailure"]


async def test_request_summary_sends_the_command_with_the_sessions_own_key() -> None:
    client = ReplyingClient(lambda c: summary(c.reply_to))
    assert await client.request_summary(SESSION, timeout=5, force=True, key=b"app:u1:s1") is not None
    assert client.keys == [b"app:u1:s1"]


def test_nothing_to_summarize_is_told_apart_from_a_failure() -> None:
    def decoded(error_class: str) -> SummaryFailure:
        return SummaryFailure.model_validate_json(failure(error_class))

    assert is_nothing_to_summarize(decoded("NothingToSummarize"))
    assert is_nothing_to_summarize(decoded(SummarySkipped.__name__))  # the worker's error_class
    assert not is_nothing_to_summarize(decoded("APIConnectionError"))


class ReplyingClient(DistillClient):
    """``request_summary`` with no broker: each command is answered by ``answer(command)``."""

    def __init__(self, answer: Callable[[SummarizeSync], bytes]) -> None:
        super().__init__(Settings())
        self.answer = answer
        self.commands: list[SummarizeSync] = []
        self.keys: list[bytes | None] = []

    async def publish(self, record: Any, *, key: bytes | None = None) -> tuple[int, int]:
        self.commands.append(record)
        self.keys.append(key)
        return 0, len(self.commands)

    async def _follower(self, from_beginning: bool) -> Any:
        client = self

        class Follower:
            async def __aiter__(self) -> AsyncIterator[Msg]:  # type: ignore[misc]
                yield Msg("sum", 0, 0, SESSION.kafka_key(), client.answer(client.commands[-1]))

            async def stop(self) -> None:
                pass

        return Follower()


async def test_request_summary_defaults_to_unforced_and_returns_none_for_nothing_to_summarize() -> None:
    client = ReplyingClient(lambda c: failure("NothingToSummarize", filter_key="", reply_to=c.reply_to))
    assert await client.request_summary(SESSION, timeout=5) is None
    (command,) = client.commands
    assert command.force is False and command.filter_key == ""


async def test_request_summary_raises_for_a_real_failure_and_returns_a_summary() -> None:
    failing = ReplyingClient(lambda c: failure("APIConnectionError", reply_to=c.reply_to))
    with pytest.raises(SummaryUnavailableError) as caught:
        await failing.request_summary(SESSION, "br/x", timeout=5)
    assert caught.value.failure.error_class == "APIConnectionError"
    answered = ReplyingClient(lambda c: summary(c.reply_to, filter_key="br/x"))
    got = await answered.request_summary(SESSION, "br/x", timeout=5, force=True)
    assert got is not None and got.filter_key == "br/x" and answered.commands[0].force is True


def test_a_sync_record_without_force_reads_as_forced_and_the_client_always_sends_it() -> None:
    """Backward compatibility: an absent ``force`` keeps the meaning it had when the record was written."""
    raw = b'{"type": "summarize_sync", "app_name": "a", "user_id": "u", "session_id": "s",'
    raw += b' "command_id": "c", "reply_to": "r"}'
    assert SummarizeSync.model_validate_json(raw).force is True
    unforced = sync_command().model_copy(update={"force": False})
    assert json.loads(encode_record(unforced))["force"] is False


def reply(reply_to: str, filter_key: str = "") -> bytes:
    """The worker's answer naming the key's summary (published for another job)."""
    named = SessionSummary.model_validate_json(summary(None, filter_key=filter_key))
    return SummaryReply(
        app_name="app", user_id="u1", session_id="s1", filter_key=filter_key, job_id="join-1", reply_to=reply_to,
        summary=named, created_at=T,
    ).model_dump_json().encode()  # fmt: skip


async def test_a_request_answered_by_a_reply_returns_the_summary_it_names() -> None:
    client = ReplyingClient(lambda c: reply(c.reply_to))
    got = await client.request_summary(SESSION, timeout=5)
    assert isinstance(got, SessionSummary) and got.summary == "text" and got.job_id == "j"


class FollowingClient(DistillClient):
    """``summaries()`` with no broker: the summaries topic holds ``msgs``."""

    def __init__(self, msgs: list[Msg]) -> None:
        super().__init__(Settings())
        self.msgs = msgs

    async def _follower(self, from_beginning: bool) -> Any:
        class Follower(FakeConsumer):
            async def stop(self) -> None:
                pass

        return Follower(self.msgs)


async def test_following_summaries_leaves_replies_out() -> None:
    """A reply is an answer, never a new version: ``summaries()`` yields the summaries only."""
    key = SESSION.kafka_key()
    client = FollowingClient([Msg("sum", 0, 0, key, summary()), Msg("sum", 0, 1, key, reply("corr"))])
    got = [r async for r in client.summaries(SESSION, include_failures=True)]
    assert [type(r).__name__ for r in got] == ["SessionSummary"]
