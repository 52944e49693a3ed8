"""The adapters' session view over the one context read, against the real Cassandra."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from projections.context_read import ContextReader
from schemas import SessionKey
from schemas.reads import ContextRead
from streams.adapters.backend import EpochSwitchingError, SessionBackend
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


async def test_a_summary_between_parallel_results_leaves_no_call_without_its_result(
    store: Store, key: SessionKey
) -> None:
    """Calls c1 and c2 in one event; the summary's boundary is c1's result. The real read brings the covered
    call event back for c2's result; the view, and the trpc and OpenAI Agents histories built on it, show it
    as c2 alone (c1's result is covered: a call without it is refused by the provider)."""
    pytest.importorskip("trpc_agent_sdk.events", exc_type=ImportError)
    pytest.importorskip("agents")
    from agents.models.chatcmpl_converter import Converter

    from streams.adapters.openai_agents_session import DistillSession
    from streams.adapters.trpc_session import DistillSessionService
    from streams.context.compaction import CompactionConfig
    from streams.context.validity import find_violations

    calls = [*_call("c1"), *_call("c2")]
    values = [
        event(key, "u1", at=1, content="上海和北京的天气？ 标记0001号"),
        event(key, "a1", at=2, role="assistant", content="查两个城市 标记0002号", tool_calls=calls),
        event(key, "t1", at=3, role="tool", content="上海小雨 标记0003号", tool_call_id="c1"),
        event(key, "t2", at=4, role="tool", content="北京晴 标记0004号", tool_call_id="c2"),
        event(key, "a2", at=5, role="assistant", content="上海小雨，北京晴 标记0005号"),
    ]
    await store.events(*values)
    await store.summaries(summary(key, 1, text="摘要 标记0001号 标记0002号 标记0003号", cutoff=3, last_event_id="t1"))
    async with SessionBackend(store.settings) as backend:
        view = await backend.view(key)
        assert [e.event_id for e in view.events] == ["a1", "t2", "a2"] and view.calls_only == {"a1": {"c2"}}
        service = DistillSessionService(backend=backend)
        session = await service.get_session(app_name=key.app_name, user_id=key.user_id, session_id=key.session_id)
        agents = DistillSession(key.session_id, backend, app_name=key.app_name, user_id=key.user_id,
                                compaction=CompactionConfig(enabled=False))  # fmt: skip
        items = await agents.get_items()
    assert session is not None
    trpc_calls = [p.function_call.id for e in session.events if e.content for p in e.content.parts or []
                  if p.function_call]  # fmt: skip
    trpc_results = [p.function_response.id for e in session.events if e.content for p in e.content.parts or []
                    if p.function_response]  # fmt: skip
    assert trpc_calls == trpc_results == ["c2"]
    assert find_violations(Converter.items_to_messages(items)) == []
    shown = str(items)
    assert all(f"标记{n:04d}号" in shown for n in range(1, 6)), "every marker in the summary item or the history"


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


class SwitchAfterRead(ContextReader):
    """The real context read; the first one is followed by an epoch switch (``switch``), before the
    caller reads anything else: the switch lands between the view's two reads, deterministically."""

    def __init__(self, store: Store, switch: Callable[[], Awaitable[object]]) -> None:
        super().__init__(store.session, store.settings.cassandra.keyspace)
        self._switch: Callable[[], Awaitable[object]] | None = switch

    async def read(self, *args: Any, **kwargs: Any) -> ContextRead:
        read = await super().read(*args, **kwargs)
        switch, self._switch = self._switch, None
        if switch is not None:
            await switch()
        return read


@pytest.mark.parametrize("replayed_version", [1, 2, 3])
async def test_an_epoch_switch_between_the_views_reads_loses_no_event(
    store: Store, key: SessionKey, replayed_version: int
) -> None:
    """The view's summary and its events come from one epoch, whatever switch lands between its reads.

    The live line's head covers up to e4; the replay's (the epoch adopted right after the context
    read) covers up to e2. Served from the replay's line, e3 and e4 are in no summary: the view must
    show them. Oracle: every event's marker is in the view's summary or among its events.
    """
    markers = {f"e{i}": f"标记{i:04d}号" for i in range(1, 7)}
    roles = ["user", "assistant"] * 3
    await store.events(*(event(key, eid, at=i + 1, role=roles[i], content=f"第{i + 1}句 {m}")
                         for i, (eid, m) in enumerate(markers.items())))  # fmt: skip
    live = summary(key, 2, text=f"摘要 {' '.join(markers[e] for e in ('e1', 'e2', 'e3', 'e4'))}", cutoff=4,
                   last_event_id="e4")  # fmt: skip
    await store.summaries(live)
    replay = {**summary(key, replayed_version, text=f"重放摘要 {markers['e1']} {markers['e2']}", cutoff=2,
                        last_event_id="e2"), "epoch": 1}  # fmt: skip
    adopted = {
        "type": "epoch_adopted", "app_name": key.app_name, "user_id": key.user_id, "session_id": key.session_id,
        "epoch": 1, "previous_epoch": 0, "heads": [{"summary": replay, "events_offset": None}], "replaced": [],
        "command_id": "c1", "created_at": datetime.now(UTC).isoformat(),
    }  # fmt: skip
    context = SwitchAfterRead(store, lambda: store.summaries(adopted))
    async with SessionBackend(store.settings, context=context) as backend:
        view = await backend.view(key)
    assert view.summary is not None and (view.summary.epoch, view.summary.version) == (1, replayed_version)
    shown = view.summary.summary + "\n" + "\n".join(e.message.content or "" for e in view.events)
    lost = [eid for eid, m in markers.items() if m not in shown]
    assert not lost, f"events {lost} are neither in the view's summary nor among its events"


async def test_a_view_whose_epoch_switches_at_every_read_fails_with_a_clear_error(
    store: Store, key: SessionKey
) -> None:
    """Switched back and forth after every read, no read pairs with its summary: an error, not a wrong view."""
    await store.events(*(event(key, f"e{i}", at=i, content=f"第{i}句") for i in range(1, 4)))
    lines = {
        0: summary(key, 1, text="live 摘要", cutoff=2, last_event_id="e2"),
        1: {**summary(key, 1, text="重放摘要", cutoff=1, last_event_id="e1"), "epoch": 1},
    }
    await store.summaries(lines[0])
    switches = iter(range(1, 100))

    async def switch() -> None:
        n = next(switches)
        epoch = n % 2
        await store.summaries({
            "type": "epoch_adopted", "app_name": key.app_name, "user_id": key.user_id,
            "session_id": key.session_id, "epoch": epoch, "previous_epoch": 1 - epoch,
            "heads": [{"summary": lines[epoch], "events_offset": None}], "replaced": [], "command_id": f"c{n}",
            "created_at": datetime.now(UTC).isoformat(),
        })  # fmt: skip

    class SwitchAfterEveryRead(SwitchAfterRead):
        async def read(self, *args: Any, **kwargs: Any) -> ContextRead:
            self._switch = switch
            return await super().read(*args, **kwargs)

    async with SessionBackend(store.settings, context=SwitchAfterEveryRead(store, switch)) as backend:
        with pytest.raises(EpochSwitchingError, match=r"epoch of .* changed during each of 3 reads"):
            await backend.view(key)
