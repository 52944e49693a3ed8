"""The adapters' session view over the one context read, against the real Cassandra."""

from __future__ import annotations

from typing import Any

import pytest

from schemas import SessionKey
from streams.adapters.backend import SessionBackend
from tests.integration.test_projections_support import Store, event, key, store, summary

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="session")]
__all__ = ["key", "store"]


def _call(call_id: str) -> list[dict[str, Any]]:
    return [{"id": call_id, "type": "function", "function": {"name": "weather", "arguments": "{}"}}]


async def test_a_late_results_covered_call_stays_in_the_view(store: Store, key: SessionKey) -> None:
    """A framework replays the view verbatim: a tool result whose call the summary covers needs that call."""
    values = [
        event(key, "u1", at=1, content="weather in Paris? 巴黎天气"),
        event(key, "a1", at=2, role="assistant", content=None, tool_calls=_call("c-late")),
        event(key, "x1", at=3, role="assistant", content="meanwhile 另一件事"),
        event(key, "t1", at=4, role="tool", content="Paris: rain (late)", tool_call_id="c-late"),
        event(key, "a2", at=5, role="assistant", content="it rains in Paris"),
    ]
    await store.events(*values)
    await store.summaries(summary(key, 1, text="Paris asked; 另一件事", cutoff=3, last_event_id="x1"))
    async with SessionBackend(store.settings) as backend:
        view = await backend.view(key)
    assert view.summary is not None and view.summary.version == 1
    assert [e.event_id for e in view.events] == ["a1", "t1", "a2"]  # x1 and u1 the summary holds
    assert view.stored_events == len(values)


async def test_a_branch_sees_its_ancestors_summary(store: Store, key: SessionKey) -> None:
    """A branch without a summary of its own: the session's summary applies, its covered events stay out."""
    values = [
        event(key, "u1", at=1, content="第一个问题", filter_key="app/b"),
        event(key, "a1", at=2, role="assistant", content="first answer", filter_key="app/b"),
        event(key, "u2", at=3, content="second question", filter_key="app/b"),
        event(key, "a2", at=4, role="assistant", content="第二个回答", filter_key="app/b"),
    ]
    await store.events(*values)
    await store.summaries(summary(key, 1, text="the first exchange", cutoff=2, last_event_id="a1"))
    async with SessionBackend(store.settings) as backend:
        view = await backend.view(key, "app/b")
    assert view.summary is not None and view.summary.filter_key == ""
    assert [e.event_id for e in view.events] == ["u2", "a2"]
