"""A tool result too large to record (over ``kafka.max_record_bytes`` as an event: CJK text is three bytes
a character) is answered to the model as an error, like a failing tool: the run's other results are
published, and what the model is shown is what the session keeps."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from pydantic import BaseModel

import streams.client
from schemas import Message, SessionEvent, SessionKey
from schemas.settings import KafkaSettings, Settings
from streams.adapters.backend import SessionBackend
from streams.agent.facade import DistillAgent
from streams.client import DistillClient, encode_record
from streams.errors import RecordTooLargeError
from tests.unit.agent.test_facade_clock import LogAndCut
from tests.unit.context.sessions import summary_at

KEY = SessionKey("app", "u1", "s1")
LIMIT = 20_000


class LimitedLog(LogAndCut):
    """The log, refusing a batch holding a record over the limit as the client does (nothing sent)."""

    async def publish_logged(self, records: Iterable[SessionEvent], encoded: list[bytes] | None = None) -> list[int]:
        batch = list(records)
        for record, value in zip(batch, encoded or [encode_record(r) for r in batch], strict=True):
            if len(value) > LIMIT:
                raise RecordTooLargeError(record.event_id, len(value), LIMIT)
        return await super().publish_logged(batch)


def _first(text: str) -> SessionEvent:
    return SessionEvent(app_name=KEY.app_name, user_id=KEY.user_id, session_id=KEY.session_id, event_id="e0",
                        timestamp=datetime.now(UTC) - timedelta(seconds=5), author="user",
                        message=Message(role="user", content=text), request_id="r0", invocation_id="r0")  # fmt: skip


def _agent(log: LogAndCut, client: object) -> DistillAgent:
    settings = Settings(kafka=KafkaSettings(max_record_bytes=LIMIT))
    backend = SessionBackend(settings, client=client, reader=log, context=log)  # type: ignore[arg-type]
    return DistillAgent(backend, app_name=KEY.app_name, user_id=KEY.user_id, session_id=KEY.session_id)


def _calling(*names: str) -> dict[str, object]:
    """An assistant reply calling the tools ``names``, ids ``c0``, ``c1``..."""
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"c{n}", "type": "function", "function": {"name": name, "arguments": "{}"}}
        for n, name in enumerate(names)
    ]}  # fmt: skip


async def test_a_result_over_the_record_limit_is_an_error_answer_and_the_others_are_published() -> None:
    first = _first("查资料 标记0")
    log = LimitedLog([first], summary_at(first, "空"))
    agent = _agent(log, log)
    await agent.user("把三份报告都拿来 标记1")
    reply = _calling("small", "huge", "after")
    await agent.record(reply)
    huge = "长" * (LIMIT // 2)  # under the limit in characters, over it in UTF-8 bytes
    results = await agent.run_tools(
        reply,
        {"small": lambda: "报告一 标记2", "huge": lambda: "报告二 标记3 " + huge, "after": lambda: "报告三 标记4"},
    )
    assert [r.tool_call_id for r in results] == ["c0", "c1", "c2"]
    error = json.loads(results[1].content or "")["error"]
    assert f"over the limit of {LIMIT} bytes" in error and "标记3" not in error
    published = [e for e in log.log if e.message.role == "tool"]
    assert [e.message for e in published] == results  # what the model is shown is what is kept
    assert "标记2" in str(results[0].content) and "标记4" in str(results[2].content)
    request = await agent.next_request("sys")
    text = str(request.messages)
    assert "标记2" in text and "标记4" in text and "over the limit of" in text and "标记3" not in text


class Producer:
    """The Kafka producer under ``DistillClient``: what it was given to send, acknowledged at once."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    async def send(self, topic: str, value: bytes, key: bytes | None = None) -> asyncio.Future[SimpleNamespace]:
        self.sent.append(value)
        acked: asyncio.Future[SimpleNamespace] = asyncio.get_running_loop().create_future()
        acked.set_result(SimpleNamespace(offset=len(self.sent) - 1))
        return acked


async def test_a_tool_result_is_encoded_once_and_the_bytes_checked_against_the_limit_are_the_bytes_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = _first("查资料")
    log = LogAndCut([first], summary_at(first, "空"))
    client = DistillClient(Settings(kafka=KafkaSettings(max_record_bytes=LIMIT)))
    producer = client._producer = Producer()  # type: ignore[assignment]
    agent = _agent(log, client)
    reply = _calling("one", "two", "huge")
    await agent.record(reply)
    encoded: list[SessionEvent] = []

    def counted(record: BaseModel) -> bytes:
        assert isinstance(record, SessionEvent)
        encoded.append(record)
        return encode_record(record)

    monkeypatch.setattr(streams.client, "encode_record", counted)
    results = await agent.run_tools(
        reply, {"one": lambda: "报告一", "two": lambda: "报告二", "huge": lambda: "长" * (LIMIT // 2)}
    )
    # The huge result once (refused), then its error answer once; each other result once.
    assert [e.message.tool_call_id for e in encoded] == ["c0", "c1", "c2", "c2"]
    assert producer.sent[-3:] == [encode_record(e) for e in (encoded[0], encoded[1], encoded[3])]
    assert [json.loads(v)["message"] for v in producer.sent[-3:]] == [r.model_dump(mode="json", exclude_none=True)
                                                                       for r in results]  # fmt: skip
