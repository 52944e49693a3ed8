"""Each event is serialized once for the cache keys of every job it is part of."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from schemas import SessionEvent
from schemas.settings import Settings
from streams.summarizer import build_summarizer
from streams.summarizer.event_json import event_json, held
from streams.summarizer.summarizer import Summarizer
from tests.unit.summarizer.helpers import SESSION, ScriptedModel, rounds


class CountingSerializer:
    """``SessionEvent``'s serializer, counting the events it turns into JSON."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls = 0

    def to_json(self, value: Any, **kw: Any) -> bytes:
        self.calls += 1
        out: bytes = self.inner.to_json(value, **kw)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_an_event_held_back_for_the_next_job_is_serialized_once(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings.model_validate({"summary": {"keep_recent_rounds": 2}})
    built = build_summarizer(settings, app_name=SESSION.app_name, model=ScriptedModel(context_window=100_000))
    assert isinstance(built, Summarizer)
    events = rounds(8)
    counting = CountingSerializer(SessionEvent.__pydantic_serializer__)
    monkeypatch.setattr(SessionEvent, "__pydantic_serializer__", counting)
    # job 1: rounds 0-5 selected (6-7 kept back); job 2, after round 8 and 9: rounds 6-7 with them
    first = built.cache_key("", events)
    later = rounds(2, start=16)
    second = built.cache_key("a summary", events[12:] + later)
    third = built.cache_key("a summary", events[12:] + later)  # a retry of the second job
    assert first and second and second == third
    assert counting.calls == 12 + 4  # each selected event once: rounds 0-5, then 6-7 (8-9 are kept back)


def test_the_json_is_the_events_own_and_goes_with_it() -> None:
    event = rounds(1)[0]
    raw = event_json(event)
    assert raw == event.model_dump_json().encode()
    assert event_json(event) is raw
    before = held()
    twin = event.model_copy(update={"event_id": "other"})  # another object: its own JSON
    assert event_json(twin) == twin.model_dump_json().encode() != raw
    assert held() == before + 1
    del event, twin
    gc.collect()
    assert held() == before - 1
