"""A tool result too large to record (over ``kafka.max_record_bytes`` as an event: CJK text is three bytes
a character) is answered to the model as an error, like a failing tool: the run's other results are
published, and what the model is shown is what the session keeps."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from schemas import Message, SessionEvent, SessionKey
from schemas.settings import KafkaSettings, Settings
from streams.adapters.backend import SessionBackend
from streams.agent.facade import DistillAgent
from streams.client import encode_record
from streams.errors import RecordTooLargeError
from tests.unit.agent.test_facade_clock import LogAndCut
from tests.unit.context.sessions import summary_at

KEY = SessionKey("app", "u1", "s1")
LIMIT = 20_000


class LimitedLog(LogAndCut):
    """The log, refusing a batch holding a record over the limit as the client does (nothing sent)."""

    async def publish_logged(self, records: Iterable[SessionEvent]) -> list[int]:
        batch = list(records)
        for record in batch:
            if len(encode_record(record)) > LIMIT:
                raise RecordTooLargeError(record.event_id, len(encode_record(record)), LIMIT)
        return await super().publish_logged(batch)


async def test_a_result_over_the_record_limit_is_an_error_answer_and_the_others_are_published() -> None:
    first = SessionEvent(app_name=KEY.app_name, user_id=KEY.user_id, session_id=KEY.session_id, event_id="e0",
                         timestamp=datetime.now(UTC) - timedelta(seconds=5), author="user",
                         message=Message(role="user", content="查资料 标记0"), request_id="r0",
                         invocation_id="r0")  # fmt: skip
    log = LimitedLog([first], summary_at(first, "空"))
    settings = Settings(kafka=KafkaSettings(max_record_bytes=LIMIT))
    backend = SessionBackend(settings, client=log, reader=log, context=log)  # type: ignore[arg-type]
    agent = DistillAgent(backend, app_name=KEY.app_name, user_id=KEY.user_id, session_id=KEY.session_id)
    await agent.user("把三份报告都拿来 标记1")
    reply = {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"c{n}", "type": "function", "function": {"name": name, "arguments": "{}"}}
        for n, name in enumerate(("small", "huge", "after"))
    ]}  # fmt: skip
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
