"""Late events against the real Cassandra, written by the real projector: visible until a summary holds them.

A late event is logged after a summary's boundary event but stamped before its cutoff (a producer's
clock behind, a sub-agent flushing late). The summarizer puts it in the next pass (log order), so the
request built from Cassandra alone (``ContextReader.read`` + ``assemble_from_read``) must show it. The
oracle: a marker in every event, the summary holding the covered ones; every marker is in the request,
and a covered one only in the summary. Before the read went by the log, the late event was in neither.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from projections.context_read import ContextReader
from projections.indexer import RecallIndexer
from projections.projector import Projector
from schemas import SessionEvent, SessionKey, SessionSummary
from streams.context import AssemblyOptions, assemble, assemble_from_read
from tests.integration.test_projections_support import EVENTS, SUMMARIES, Store, event, key, record, store, summary

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="session")]
__all__ = ["key", "store"]

OPTS = AssemblyOptions(add_session_summary=True)
MARKER = re.compile(r"标记\d+号")


def _m(n: int) -> str:
    return f"标记{n}号"


def _session(key: SessionKey) -> list[dict[str, Any]]:
    values = [
        event(key, "e1", at=1, content=f"帮我查一下去大阪的航班 {_m(1)}"),
        event(key, "e2", at=2, role="assistant", content=f"有三班直飞 {_m(2)}"),
        event(key, "e3", at=3, content=f"订最早的那班 {_m(3)}"),
        event(key, "e4", at=4, role="assistant", content=f"已订好 9:05 的航班 {_m(4)}"),
        event(key, "e5", at=5, content=f"酒店呢？ {_m(5)}"),
        event(key, "e6", at=6, role="assistant", content=f"在找难波附近的酒店 {_m(6)}"),
    ]
    for v in values:
        v["invocation_id"] = v["request_id"] = "inv1" if v["event_id"] <= "e4" else "inv2"
    return values


def _summary(key: SessionKey, **kw: Any) -> dict[str, Any]:
    text = f"用户订了去大阪 9:05 的航班 {_m(1)} {_m(2)} {_m(3)} {_m(4)}"
    return summary(key, 1, text=text, cutoff=4, last_event_id="e4", **kw)


def _late(key: SessionKey, **kw: Any) -> dict[str, Any]:
    """Logged after everything, stamped at 1.5 s: before the boundary's cutoff (4 s), even before e2."""
    text = f"子代理迟到的结果：难波的酒店已预订，含早餐 {_m(7)}"
    v = event(key, "late", at=1.5, role="assistant", content=text, **kw)
    v["invocation_id"] = v["request_id"] = "inv2"
    return v


def _markers(messages: list[dict[str, Any]], *, system: bool) -> list[str]:
    return [m for msg in messages if (msg["role"] == "system") == system for m in MARKER.findall(str(msg))]


async def _request(store: Store, key: SessionKey, branch: str = "") -> tuple[Any, Any]:
    read = await ContextReader(store.session, store.settings.cassandra.keyspace, page_size=4).read(key, branch)
    return read, assemble_from_read("sys", read, options=OPTS)


def _log_order(read: Any, values: list[dict[str, Any]]) -> bool:
    """Whether the read's events are in the order they were logged (``values``)."""
    logged = [v["event_id"] for v in values]
    ids = [e.event_id for e in read.events]
    return ids == [i for i in logged if i in ids]


@pytest.mark.parametrize("memory", ["remembered", "restarted"])
async def test_a_late_event_logged_after_the_boundary_is_in_the_request(
    store: Store, key: SessionKey, memory: str
) -> None:
    values = _session(key)
    await store.events(*values)
    await store.summaries(_summary(key))
    projector = store.projector
    if memory == "restarted":  # a projector that remembers nothing: it reads the session's newest stamp
        projector = Projector(store.session, store.settings.cassandra.keyspace, events_topic=EVENTS,
                              summaries_topic=SUMMARIES, consumer_group="g")  # fmt: skip
    late = _late(key)

    async def sink(letter: Any) -> None:
        raise AssertionError(letter)

    await projector.project([record(EVENTS, late)], sink)
    read, got = await _request(store, key)
    # Every event after the boundary event, the late one included, is in the request; the covered ones are
    # only in the summary (the system message).
    assert sorted(_markers(got.messages, system=False)) == sorted(_m(n) for n in (5, 6, 7))
    assert sorted(_markers(got.messages, system=True)) == sorted(_m(n) for n in (1, 2, 3, 4))
    # In log order: the late event comes last, where it was logged, not at its stamp's place.
    assert _log_order(read, [*values, late]) and read.events[-1].event_id == "late"
    # The boundary event's log position, for a caller that knows its own events' positions (the facade).
    assert read.boundary_seq is not None
    assert got.messages[-1]["content"].endswith(_m(7))
    # The request the full history in log order gives (the pure rules the read matches).
    history = [SessionEvent.model_validate(v) for v in (*values, late)]
    assert got.messages == assemble("sys", SessionSummary.model_validate(_summary(key)), history, None, (),
                                    OPTS).messages  # fmt: skip
    # The read API's events after the boundary agree.
    after = await store.reader.events_after_boundary(key)
    assert [e.event_id for e in after] == ["e5", "e6", "late"]


async def test_late_events_before_the_boundary_event_stay_covered_and_are_not_read(
    store: Store, key: SessionKey
) -> None:
    """Late events logged before the boundary event are summarized: hidden, and the read does not fetch them."""
    values = [event(key, "e0", at=1000, role="assistant", content=f"开始 {_m(0)}")]
    values += [event(key, f"old{n}", at=n, role="assistant", content=f"旧的 {_m(100 + n)}") for n in range(200)]
    values += [event(key, "u", at=1000.5, content=f"问题 {_m(1)}"), event(key, "b", at=1001, role="assistant",
                                                                          content=f"边界 {_m(2)}")]  # fmt: skip
    await store.events(*values)
    await store.summaries(summary(key, 1, text="全部", cutoff=1001, last_event_id="b"))
    await store.events(event(key, "after", at=500, role="assistant", content=f"边界之后，时间戳更早 {_m(3)}"))
    read, got = await _request(store, key)
    assert _markers(got.messages, system=False) == [_m(1), _m(3)]  # the current question, and the late event
    assert read.stats.event_rows <= 6, read.stats  # not the 200 covered late rows


async def test_an_event_published_again_after_the_boundary_stays_covered(store: Store, key: SessionKey) -> None:
    """A producer's retry sends e2 again after the summary: the summary holds it, the request does not repeat it."""
    values = _session(key)
    await store.events(*values)
    await store.summaries(_summary(key))
    await store.events(values[1], _late(key))
    read, got = await _request(store, key)
    assert sorted(_markers(got.messages, system=False)) == sorted(_m(n) for n in (5, 6, 7))
    assert _log_order(read, [*values, _late(key)])
    rows = store.session.execute(
        f"SELECT event_id FROM {store.settings.cassandra.keyspace}.late_events "
        "WHERE app_name = %s AND user_id = %s AND session_id = %s", tuple(key),
    )  # fmt: skip
    assert [r.event_id for r in rows] == ["late"]  # e2 is where the log first had it, and not late again


@pytest.mark.parametrize("memory", ["remembered", "restarted"])
async def test_an_event_published_again_in_its_own_millisecond_keeps_its_place(
    store: Store, key: SessionKey, memory: str
) -> None:
    """e4 and e5 share a stamp; the summary ends at e4 (e5 is logged after it: not in the summary). A retry
    sends e4 again right after e5: nothing stamped later lies between, so it is not late, yet it stays where
    the log first had it: e5 is still in the request (the summary does not hold it) and e4 is not repeated.
    Search finds e4 as covered."""
    values = _session(key)
    values[4].update(
        role="assistant",
        author="agent",
        request_id="inv1",
        invocation_id="inv1",
        timestamp=values[3]["timestamp"],
        message={"role": "assistant", "content": f"补充 {_m(5)}"},
    )
    await store.events(*values[:5])
    await store.summaries(_summary(key))
    if memory == "restarted":  # the projector and the indexer no longer remember the session's latest stamp
        ks = store.settings.cassandra.keyspace
        store.projector = Projector(store.session, ks, events_topic=EVENTS, summaries_topic=SUMMARIES,
                                    consumer_group="g")  # fmt: skip
        store.indexer = RecallIndexer(store.session, ks, events_topic=EVENTS, consumer_group="g-index")
    nxt = event(key, "e7", at=7, content=f"好的 {_m(7)}")
    nxt["invocation_id"] = nxt["request_id"] = "inv3"
    await store.events(values[3], nxt)
    _, got = await _request(store, key)
    # e3: the question of the request the boundary cuts (its resume tail); e4 is not repeated.
    assert _markers(got.messages, system=False) == [_m(3), _m(5), _m(7)]
    assert sorted(_markers(got.messages, system=True)) == sorted(_m(n) for n in range(1, 5))
    hits = await store.reader.session_search(key, "航班", "current_hidden")
    assert "e4" in [h.event_id for h in hits]


async def test_a_branch_under_an_ancestors_summary_sees_the_late_event(store: Store, key: SessionKey) -> None:
    """The applicable summary is the app's, its boundary event another branch's: still the place of the cut."""
    values = [
        event(key, "u1", at=1, content=f"订机票和酒店 {_m(1)}", filter_key="app"),
        event(key, "f1", at=2, role="assistant", content=f"机票已订 {_m(2)}", filter_key="app/flights"),
        event(key, "h1", at=3, role="assistant", content=f"酒店在找 {_m(3)}", filter_key="app/hotels"),
    ]
    await store.events(*values)
    s = summary(key, 1, text=f"摘要 {_m(1)} {_m(2)} {_m(3)}", cutoff=3, last_event_id="h1", filter_key="app")
    await store.summaries(s)
    late = event(key, "f2", at=1.5, role="assistant", content=f"改签结果（迟到） {_m(4)}", filter_key="app/flights")
    await store.events(late)
    read, got = await _request(store, key, "app/flights")
    assert read.summary is not None and read.summary.source == "ancestor"
    assert _markers(got.messages, system=False) == [_m(1), _m(4)]  # the current question (covered), the late event
    history = [SessionEvent.model_validate(v) for v in (*values, late)]
    opts = AssemblyOptions(add_session_summary=True, filter_key="app/flights")
    assert got.messages == assemble("sys", SessionSummary.model_validate(s), history, None, (), opts).messages
    assert "h1" in [e.event_id for e in read.events]  # the boundary event, which the branch does not show


async def test_a_deletion_removes_the_late_events_and_the_session_starts_afresh(store: Store, key: SessionKey) -> None:
    values = _session(key)
    await store.events(*values)
    await store.summaries(_summary(key))
    await store.events(_late(key))
    ks = store.settings.cassandra.keyspace
    late_rows = f"SELECT event_id FROM {ks}.late_events WHERE app_name = %s AND user_id = %s AND session_id = %s"
    assert [r.event_id for r in store.session.execute(late_rows, tuple(key))] == ["late"]
    await store.apply(record(EVENTS, {"type": "delete_session", "app_name": key.app_name, "user_id": key.user_id,
                                      "session_id": key.session_id, "command_id": "d1"}))  # fmt: skip
    assert list(store.session.execute(late_rows, tuple(key))) == []
    # Imported again with its old stamps: nothing is late, the deleted events are not what it follows.
    await store.events(event(key, "n1", at=0.5, content=f"重新开始 {_m(8)}"))
    assert list(store.session.execute(late_rows, tuple(key))) == []
    _, got = await _request(store, key)
    assert _markers(got.messages, system=False) == [_m(8)]
