"""The adapters' session view loses no event: each is in the view's summary or among its events.

The oracle: every event carries a marker, and the summary echoes the markers of
the events up to its boundary (its input). After any sequence of publishes,
summaries and projector steps, every marker is in the view's summary text or in
one of the view's events. Kafka and Cassandra are a log in memory
(:mod:`tests.unit.adapters.log_store`).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from schemas import SessionEvent, SessionKey, SessionSummary
from schemas.settings import Settings
from streams.adapters.backend import SessionBackend, SessionView
from tests.unit.adapters.log_store import LogStore
from tests.unit.context.oracle import marker
from tests.unit.context.sessions import T0, Session, summary_at

KEY = SessionKey("app", "u1", "s1")


def _markers(events: list[SessionEvent]) -> list[str]:
    return [m for e in events for m in re.findall(r"标记\d{4}号", str(e.message.model_dump()))]


def echo_summary(events: list[SessionEvent], boundary: SessionEvent, version: int = 1) -> SessionSummary:
    """The summary a model that echoes its input writes for the events up to ``boundary`` (log order)."""
    upto = events[: events.index(boundary) + 1]
    summary = summary_at(boundary, "摘要：" + " ".join(_markers(upto)))
    return summary.model_copy(update={"version": version})


def unaccounted(view: SessionView, events: list[SessionEvent]) -> list[str]:
    """Ids of ``events`` whose marker is in neither the view's summary nor its events."""
    summary = view.summary.summary if view.summary is not None else ""
    shown = set(_markers(list(view.events)))
    return [e.event_id for e in events if not all(m in summary or m in shown for m in _markers([e]))]


def _backend(store: LogStore) -> SessionBackend:
    return SessionBackend(Settings(), client=store, reader=store, context=store)  # type: ignore[arg-type]


def _at(event: SessionEvent, ts: datetime) -> SessionEvent:
    return event.model_copy(update={"timestamp": ts})


async def test_an_event_published_after_the_boundary_event_stays_in_the_view_whatever_its_stamp() -> None:
    """Another producer's clock ahead: the boundary event is stamped after this process's next event.

    The summary's boundary event was logged before that event: the event is after the boundary (the
    summarizer reads the log), in the next pass, and must be in the view until then — also while the
    projector has not written it yet (the view merges what this process published).
    """
    s = Session()
    s.turn("r1").user(f"去杭州 {marker(1)}")
    s.answer(f"好的 {marker(2)}")
    ahead = s.answer(f"另一个代理的回答 {marker(3)}")  # another producer, its clock an hour ahead
    s.turn("r2").user(f"还有一个问题 {marker(4)}")
    events = [s.events[0], s.events[1], _at(ahead, T0 + timedelta(hours=1)), s.events[3]]
    store = LogStore()
    backend = _backend(store)
    await backend.publish(events[:2])
    store.project()
    await backend.view(KEY)
    store.append(events[2], echo_summary(events, events[2]))
    store.project()
    await backend.publish(events[3:])  # stamped by this process's clock: before the boundary event's stamp
    view = await backend.view(KEY)
    assert view.summary is not None
    assert unaccounted(view, events) == [], "the user's new message is in no summary and must be in the view"
    store.project()
    assert unaccounted(await backend.view(KEY), events) == []


async def test_a_branch_summary_received_before_it_is_projected_hides_no_event_of_its_ancestors_cut() -> None:
    """The read cut a branch's events at its ancestor's summary; the view shows the branch's own newer one.

    The branch's own summary (received by this process, not projected yet) ends before the session's
    summary does: the events between the two boundaries are in the branch's next pass, and the view
    must show them — the read, cut at the session's boundary, does not hold them.
    """
    s = Session()
    s.turn("r1").user(f"研究杭州 {marker(1)}", filter_key="app/b")
    own_end = s.answer(f"第一段结果 {marker(2)}", filter_key="app/b")
    s.turn("r2").user(f"再研究西湖 {marker(3)}", filter_key="app/b")
    root_end = s.answer(f"第二段结果 {marker(4)}", filter_key="app/b")
    s.turn("r3").user(f"总结一下 {marker(5)}", filter_key="app/b")
    events = s.events
    store = LogStore()
    backend = _backend(store)
    await backend.publish(events)
    root = echo_summary(events, root_end)
    own = echo_summary(events, own_end).model_copy(update={"filter_key": "app/b"})
    store.append(root)
    store.project()
    backend.remember(own)  # the worker's answer to this process, ahead of the projector
    view = await backend.view(KEY, "app/b")
    assert view.summary is not None and view.summary.filter_key == "app/b"
    assert unaccounted(view, events) == [], "the events after the branch's boundary are in no summary it shows"


def test_events_published_here_go_among_the_read_ones_by_log_position() -> None:
    """The projector writes a batch's rows concurrently: the read may hold e5 but not yet e3 and e4."""
    from datetime import UTC, datetime, timedelta

    from schemas import SessionEvent
    from streams.adapters.backend import _in_log_order

    t0 = datetime(2026, 1, 1, tzinfo=UTC)

    def ev(n: int) -> SessionEvent:
        return SessionEvent.model_validate({
            "app_name": "a", "user_id": "u", "session_id": "s", "event_id": f"e{n}",
            "timestamp": t0 + timedelta(seconds=10 - n),  # stamps disagree with the log: the order must not use them
            "author": "user", "message": {"role": "user", "content": f"标记 M{n}"},
        })  # fmt: skip

    projected = [ev(1), ev(2), ev(5)]
    merged = _in_log_order(projected, {"e1": 0, "e2": 1, "e5": 4}, [ev(3), ev(4), ev(6)], {"e3": 2, "e4": 3, "e6": 5})
    assert [e.event_id for e in merged] == ["e1", "e2", "e3", "e4", "e5", "e6"]
    # positions unknown (an older projection): the read's order, then what this process published
    assert [e.event_id for e in _in_log_order(projected, {}, [ev(3)], {"e3": 2})] == ["e1", "e2", "e5", "e3"]
