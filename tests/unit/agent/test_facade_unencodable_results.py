"""A tool result holding a character UTF-8 cannot hold (a lone surrogate: a file name ``os.listdir``
decoded with ``surrogateescape``, a JSON string with half an escaped pair) could not be encoded as an
event: ``run_tools`` raised, and the batch's other results, their tools run, were never published."""

from __future__ import annotations

import json
import logging
import os
from datetime import UTC, datetime, timedelta

import pytest

from schemas import Message, SessionEvent, SessionKey
from schemas.settings import Settings
from streams.adapters.backend import SessionBackend
from streams.agent.facade import DistillAgent
from streams.client import encode_record
from tests.unit.agent.test_facade_clock import LogAndCut
from tests.unit.context.sessions import summary_at

KEY = SessionKey("app", "u1", "s1")


def _listing() -> list[str]:
    # a Latin-1 name beside a UTF-8 one
    return ["报告 标记2.txt", os.fsdecode(b"caf\xe9 \xe6\xa0\x87\xe8\xae\xb03.txt")]


def _fails() -> str:
    raise ValueError("cannot read " + os.fsdecode(b"/tmp/r\xe9sum\xe9 \xe6\xa0\x87\xe8\xae\xb05"))


async def test_a_result_utf8_cannot_hold_is_published_with_the_character_escaped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # the tool's exception, logged with its surrogate, would break pytest-xdist's report of the test
    caplog.set_level(logging.ERROR, logger="streams.agent.tools")
    first = SessionEvent(app_name=KEY.app_name, user_id=KEY.user_id, session_id=KEY.session_id, event_id="e0",
                         timestamp=datetime.now(UTC) - timedelta(seconds=5), author="user",
                         message=Message(role="user", content="列出文件 标记0"), request_id="r0",
                         invocation_id="r0")  # fmt: skip
    log = LogAndCut([first], summary_at(first, "空"))
    backend = SessionBackend(Settings(), client=log, reader=log, context=log)  # type: ignore[arg-type]
    agent = DistillAgent(backend, app_name=KEY.app_name, user_id=KEY.user_id, session_id=KEY.session_id)
    await agent.user("把文件列出来 标记1")
    reply = {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"c{n}", "type": "function", "function": {"name": name, "arguments": "{}"}}
        for n, name in enumerate(("ls", "half_pair", "open", "after"))
    ]}  # fmt: skip
    await agent.record(reply)
    tools = {"ls": _listing, "half_pair": lambda: json.loads('"\\ud83d 标记4"'), "open": _fails,
             "after": lambda: "最后 标记6"}  # fmt: skip
    results = await agent.run_tools(reply, tools)
    assert [r.tool_call_id for r in results] == ["c0", "c1", "c2", "c3"]
    published = [e for e in log.log if e.message.role == "tool"]
    assert [e.message for e in published] == results  # what the model is shown is what is kept
    texts = [str(r.content) for r in results]
    assert "标记2" in texts[0] and "caf\\udce9 标记3.txt" in texts[0]
    assert texts[1] == "\\ud83d 标记4"
    assert "r\\udce9sum\\udce9 标记5" in texts[2]
    assert texts[3] == "最后 标记6"
    request = await agent.next_request("sys")
    text = str(request.messages)
    assert all(m in text for m in ("标记2", "标记3", "标记4", "标记5", "标记6"))


async def test_a_user_message_or_a_reply_utf8_cannot_hold_is_published_with_the_character_escaped() -> None:
    first = SessionEvent(app_name=KEY.app_name, user_id=KEY.user_id, session_id=KEY.session_id, event_id="e0",
                         timestamp=datetime.now(UTC) - timedelta(seconds=5), author="user",
                         message=Message(role="user", content="你好"), request_id="r0", invocation_id="r0")  # fmt: skip
    log = LogAndCut([first], summary_at(first, "空"))
    backend = SessionBackend(Settings(), client=log, reader=log, context=log)  # type: ignore[arg-type]
    agent = DistillAgent(backend, app_name=KEY.app_name, user_id=KEY.user_id, session_id=KEY.session_id)
    name = os.fsdecode(b"caf\xe9 \xe6\xa0\x87\xe8\xae\xb01.txt")
    asked = await agent.user(f"打开 {name}")
    arguments = json.dumps({"path": name}, ensure_ascii=False)
    call = {"id": "c1", "type": "function", "function": {"name": "open", "arguments": arguments}}
    replied = await agent.record({"role": "assistant", "content": f"好的，打开 {name}", "tool_calls": [call]})
    for event in (asked, replied):
        encode_record(event)  # what the Kafka client sends: it raised
    assert asked.message.content == "打开 caf\\udce9 标记1.txt"
    assert replied.message.content == "好的，打开 caf\\udce9 标记1.txt"
    assert replied.message.tool_calls[0].function.arguments == '{"path": "caf\\udce9 标记1.txt"}'
    assert [e.event_id for e in log.log] == ["e0", asked.event_id, replied.event_id]
