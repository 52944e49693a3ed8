"""The cache key is the hash of what is sent, however fast it is computed.

``Summarizer.cache_key`` does not send anything: it builds the first request on a
short path (no pass plan around it, the events' texts formatted inline). These
tests hold it to the request the model actually receives from ``summarize``: the
key equals a SHA-256 computed here, independently, over that very request (its
messages, tools and parameters), every selected event's JSON, the model and the
output settings; and any change of prompt, model, setting or event content — a
field the request text does not show included — moves the key.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Sequence
from typing import Any

import pytest

from schemas import SessionEvent
from schemas.events import ErrorInfo
from schemas.settings import Settings
from streams.summarizer import build_summarizer
from streams.summarizer.request import ChatRequest
from streams.summarizer.summarizer import Summarizer
from tests.unit.summarizer.helpers import SESSION, ScriptedModel, event, rounds

PREVIOUS = "之前的摘要：用户在调试部署脚本。"


def _summarizer(settings: Settings | None = None, *, model: str = "scripted", window: int = 100_000) -> Summarizer:
    built = build_summarizer(
        settings or Settings(),
        app_name=SESSION.app_name,
        model=ScriptedModel(default="a summary", name=model, context_window=window),
    )
    assert isinstance(built, Summarizer)
    return built


def _sent(s: Summarizer, previous: str, events: Sequence[SessionEvent], **kw: Any) -> ChatRequest:
    """The first request ``summarize`` sends the model."""
    asyncio.run(s.summarize(previous, events, **kw))
    model = s.model
    assert isinstance(model, ScriptedModel) and model.requests
    return model.requests[0]


def _key_of_sent(
    s: Summarizer, sent: ChatRequest, selected: Sequence[SessionEvent], *, force: bool = False, filter_key: str = ""
) -> str:
    """The address of ``sent``, computed here as the cache's contract states it (no code of the summarizer's)."""
    head = {
        "model": s.model.name,
        "request": {"messages": sent.messages, "tools": sent.tools, "params": sent.params},
        "max_summary_length": s.max_summary_length,
        "max_passes": s.max_passes,
        "force": force,
        "filter_key": filter_key,
        "hooks": [None, None, None, None],
    }
    digest = hashlib.sha256(json.dumps(head, sort_keys=True, ensure_ascii=False, default=str).encode())
    for e in selected:
        raw = e.model_dump_json().encode()
        digest.update(len(raw).to_bytes(8, "big"))
        digest.update(raw)
    return digest.hexdigest()


def _mixed() -> list[SessionEvent]:
    """Every kind of line the request formats: text, tool call, tool result, an error without content,
    blank content, a partial and a skipped event (neither selected), CJK."""
    return [
        event(0, "user", "请帮我检查这个部署脚本为什么失败"),
        event(1, "agent", "我先运行一下测试", tool_calls=[("c1", "run_tests", '{"path": "tests/单元"}')]),
        event(2, "tool", "失败日志：错误行 结束", tool_call_id="c1", name="run_tests"),
        event(3, "agent", None, error={"type": "RateLimit", "message": "slow down"}),
        event(4, "agent", "   "),
        event(5, "agent", "partial chunk", partial=True),
        event(6, "agent", "not for the summary", skip_summarization=True),
        event(7, "agent", "  原因是配置文件里少了一个字段，已经修好了  "),
        event(8, "user", "谢谢，再总结一下", reasoning_content="hidden reasoning"),
    ]


def _selected(events: Sequence[SessionEvent]) -> list[SessionEvent]:
    return [e for e in events if not e.partial and not e.skip_summarization]


@pytest.mark.parametrize("previous", ["", PREVIOUS])
@pytest.mark.parametrize("events", [_mixed(), rounds(6, tools=True)], ids=["mixed", "rounds"])
def test_the_key_is_the_hash_of_the_request_actually_sent(previous: str, events: list[SessionEvent]) -> None:
    s = _summarizer()
    sent = _sent(_summarizer(), previous, events)
    assert s.cache_key(previous, events) == _key_of_sent(s, sent, _selected(events))


def test_the_key_of_a_request_cut_to_its_budget_is_the_hash_of_the_cut_request_sent() -> None:
    events = [*_mixed(), event(9, "tool", "日志 " * 3000, tool_call_id="c1", name="run_tests")]
    s = _summarizer(window=2000)
    sent = _sent(_summarizer(window=2000), PREVIOUS, events)
    text = "\n".join(str(m.get("content") or "") for m in sent.messages)
    assert 0 < text.count("日志") < 3000, "the request sent must carry the long payload head + tail only"
    assert s.cache_key(PREVIOUS, events) == _key_of_sent(s, sent, _selected(events))


def test_force_and_filter_key_are_part_of_the_key_of_what_is_sent() -> None:
    events = _mixed()
    s = _summarizer()
    sent = _sent(_summarizer(), PREVIOUS, events, force=True, filter_key="agent/sub")
    expected = _key_of_sent(s, sent, _selected(events), force=True, filter_key="agent/sub")
    assert s.cache_key(PREVIOUS, events, force=True, filter_key="agent/sub") == expected


def _edited(events: list[SessionEvent], i: int, **update: Any) -> list[SessionEvent]:
    return [e.model_copy(update=update) if n == i else e for n, e in enumerate(events)]


def _with_content(events: list[SessionEvent], i: int, content: str) -> list[SessionEvent]:
    return _edited(events, i, message=events[i].message.model_copy(update={"content": content}))


def _error(message: str) -> ErrorInfo:
    return ErrorInfo(type="RateLimit", message=message)


def test_any_change_of_prompt_model_setting_or_event_content_moves_the_key() -> None:
    events = _mixed()
    base = _summarizer().cache_key(PREVIOUS, events)
    assert _summarizer().cache_key(PREVIOUS, events) == base, "the same inputs: the same key"

    def settings(**summary: Any) -> Settings:
        return Settings.model_validate({"summary": summary})

    variants = {
        "prompt": _summarizer(settings(prompt="请用要点总结：{conversation_text}")).cache_key(PREVIOUS, events),
        "system prompt": _summarizer(settings(system_prompt="You summarize.")).cache_key(PREVIOUS, events),
        "model": _summarizer(model="another-model").cache_key(PREVIOUS, events),
        "max_summary_length": _summarizer(settings(max_summary_length=40)).cache_key(PREVIOUS, events),
        "skip_recent_events": _summarizer(settings(skip_recent_events=2)).cache_key(PREVIOUS, events),
        "keep_recent_rounds": _summarizer(settings(keep_recent_rounds=1)).cache_key(PREVIOUS, events),
        "previous summary": _summarizer().cache_key(PREVIOUS + "。", events),
        "force": _summarizer().cache_key(PREVIOUS, events, force=True),
        "filter key": _summarizer().cache_key(PREVIOUS, events, filter_key="agent"),
        "event text": _summarizer().cache_key(PREVIOUS, _with_content(events, 7, "原因是配置文件里少了两个字段")),
        "error event": _summarizer().cache_key(PREVIOUS, _edited(events, 3, error=_error("later"))),
        # Fields no request text shows: the events' JSON carries them.
        "event id": _summarizer().cache_key(PREVIOUS, _edited(events, 8, event_id="e8b")),
        "timestamp": _summarizer().cache_key(PREVIOUS, _edited(events, 0, timestamp=events[1].timestamp)),
        "reasoning": _summarizer().cache_key(
            PREVIOUS,
            _edited(events, 8, message=events[8].message.model_copy(update={"reasoning_content": "other"})),
        ),
        "context": _summarizer().cache_key(PREVIOUS, _edited(events, 1, context={"k": "v"})),
        "one more event": _summarizer().cache_key(PREVIOUS, [*events, event(9, "agent", "还有一件事")]),
    }
    assert all(key is not None for key in variants.values())
    same = [name for name, key in variants.items() if key == base]
    assert not same, f"these changes left the key unchanged: {same}"
    assert len(set(variants.values())) == len(variants), "two different changes gave one key"
