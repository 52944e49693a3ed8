"""A text holding a character UTF-8 cannot hold (a lone surrogate: ``os.listdir``'s name for bytes that are
not UTF-8, half an escaped pair) could not be published: ``add_items`` / ``append_event`` raised a
serialization error, and in trpc a tool response carrying one ended the run. It is published with the
character escaped (``\\udce9``), the rest of the text (CJK) as it was, and read back the same way."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

import pytest

from schemas import SessionEvent, SessionKey
from schemas.settings import Settings
from streams.adapters.backend import SessionBackend
from streams.client import encode_record
from tests.unit.adapters.log_store import LogStore

KEY = SessionKey("app", "u1", "s1")
NAME = os.fsdecode(b"caf\xe9 \xe6\xa0\x87\xe8\xae\xb01.txt")  # a Latin-1 byte in a UTF-8 name
ESCAPED = "caf\\udce9 标记1.txt"


class EncodingLog(LogStore):
    """The log, encoding each record as the Kafka client does before it is sent."""

    async def publish_logged(self, records: Sequence[SessionEvent]) -> list[int]:
        for record in records:
            encode_record(record)
        offsets = await super().publish_logged(records)
        self.project()
        return offsets


def _backend(store: LogStore) -> SessionBackend:
    return SessionBackend(Settings(), client=store, reader=store, context=store)  # type: ignore[arg-type]


async def test_agents_items_with_a_lone_surrogate_are_kept_escaped() -> None:
    pytest.importorskip("agents")
    from streams.adapters.openai_agents_session import DistillSession
    from streams.context.compaction import CompactionConfig

    store = EncodingLog()
    session = DistillSession("s1", _backend(store), app_name=KEY.app_name, user_id=KEY.user_id,
                             compaction=CompactionConfig(enabled=False))  # fmt: skip
    items = [
        {"role": "user", "content": f"打开 {NAME}"},
        {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}", "id": "fc1"},
        {"type": "function_call_output", "call_id": "c1", "output": f"文件: {NAME} 和 报告.txt"},
    ]
    await session.add_items(items)  # type: ignore[arg-type]
    published = [e.message for e in store.log if isinstance(e, SessionEvent)]
    assert published[0].content == f"打开 {ESCAPED}"
    assert published[2].content == f"文件: {ESCAPED} 和 报告.txt"
    read = await session.get_items()
    assert read[0]["content"] == f"打开 {ESCAPED}"  # type: ignore[typeddict-item]
    assert read[2]["output"] == f"文件: {ESCAPED} 和 报告.txt"  # type: ignore[typeddict-item]


async def test_trpc_events_with_a_lone_surrogate_are_kept_escaped() -> None:
    pytest.importorskip("trpc_agent_sdk.events", exc_type=ImportError)
    from trpc_agent_sdk.events import Event, EventActions
    from trpc_agent_sdk.types import Content, FunctionCall, FunctionResponse, Part

    from streams.adapters.trpc_session import DistillSessionService

    store = EncodingLog()
    service = DistillSessionService(backend=_backend(store))
    session = await service.create_session(app_name=KEY.app_name, user_id=KEY.user_id, session_id=KEY.session_id)
    events = [
        Event(invocation_id="i1", author="user", timestamp=time.time(),
              actions=EventActions(state_delta={"file": NAME}),
              content=Content(role="user", parts=[Part.from_text(text=f"打开 {NAME}")])),
        Event(invocation_id="i1", author="agent", timestamp=time.time(),
              content=Content(role="model", parts=[Part(function_call=FunctionCall(id="c1", name="ls", args={}))])),
        Event(invocation_id="i1", author="agent", timestamp=time.time(),
              content=Content(role="user", parts=[Part(function_response=FunctionResponse(
                  id="c1", name="ls", response={"result": f"文件: {NAME} 和 报告.txt"}))])),
    ]  # fmt: skip
    for event in events:
        await service.append_event(session, event)
    published = [e.message for e in store.log if isinstance(e, SessionEvent)]
    assert published[0].content == f"打开 {ESCAPED}"
    assert ESCAPED in str(published[2].content) and "报告.txt" in str(published[2].content)
    read = await service.get_session(app_name=KEY.app_name, user_id=KEY.user_id, session_id=KEY.session_id)
    assert read is not None
    parts = [p for e in read.events if e.content for p in e.content.parts or []]
    assert parts[0].text == f"打开 {ESCAPED}"
    response = next(p.function_response for p in parts if p.function_response is not None)
    assert response.response == {"result": f"文件: {ESCAPED} 和 报告.txt"}
    assert read.state["file"] == ESCAPED
    await service.update_session_state(read, {"also": f"报告 {NAME}"})  # a state-only event
    again = await service.get_session(app_name=KEY.app_name, user_id=KEY.user_id, session_id=KEY.session_id)
    assert again is not None and again.state["also"] == f"报告 {ESCAPED}"
