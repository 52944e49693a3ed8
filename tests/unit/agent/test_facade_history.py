"""The facade shows the history before the boundary whenever its request does not show the summary.

The worker summarizes whatever the agent's options; the read side cuts at the
summary's boundary. With summaries off, or a formatter that renders nothing,
the facade must read the whole history, or everything before the boundary is
in neither the request nor an injected summary. A fake of the context reader's
interface stands for Cassandra (no service).
"""

from __future__ import annotations

from typing import Any

import pytest

from projections.context_read import applicable_summary
from schemas import SessionEvent, SessionKey, SessionSummary
from schemas.reads import ContextRead, ReadStats
from schemas.settings import Settings
from streams.adapters.backend import SessionBackend
from streams.agent.facade import AgentRequest, DistillAgent
from streams.context.from_read import READ_CAP_MARK
from streams.context.history import covered_mask
from tests.unit.context.oracle import marker, unaccounted
from tests.unit.context.sessions import Session, summary_at

KEY = SessionKey("app", "u1", "s1")


class FakeContextReader:
    """``ContextReader.read``'s contract over lists: the tail after the boundary, or (``full_history``) every
    event, the newest ``max_events`` of them (then ``stats.truncated``)."""

    def __init__(self, events: list[SessionEvent], summary: SessionSummary, max_events: int = 20_000) -> None:
        self.events = events
        self.summary = summary
        self.max_events = max_events
        self.full_reads: list[bool] = []

    async def read(
        self, key: SessionKey, filter_key: str = "", *, current_event_id: str | None = None, full_history: bool = False
    ) -> ContextRead:
        self.full_reads.append(full_history)
        applied = applicable_summary([self.summary], filter_key)
        assert applied is not None
        covered = covered_mask(self.events, applied.boundary)
        tail = [e for e, c in zip(self.events, covered, strict=True) if full_history or not c]
        shown = tail[-self.max_events :]
        users = [e for e in shown if e.message.role == "user"]
        return ContextRead(
            app_name=key.app_name, user_id=key.user_id, session_id=key.session_id, filter_key=filter_key,
            summary=applied, events=tuple(shown), full_history=full_history, current_event_id=users[-1].event_id,
            stats=ReadStats(truncated=len(shown) < len(tail)),
        )  # fmt: skip


def _session() -> tuple[list[SessionEvent], SessionSummary]:
    s = Session()
    for r in range(4):
        s.turn(f"r{r}").user(f"第{r}轮：明天去杭州吗？ {marker(2 * r + 1)}")
        s.answer(f"第{r}轮：好的，已安排。 {marker(2 * r + 2)}")
    s.turn("r4").user(f"最后一个问题 {marker(9)}")
    return s.events, summary_at(s.events[3], "前两轮：杭州行程")


async def _request(reader: FakeContextReader, **overrides: Any) -> AgentRequest:
    backend = SessionBackend(Settings(), client=reader, reader=reader, context=reader)  # type: ignore[arg-type]
    agent = DistillAgent(backend, app_name=KEY.app_name, user_id=KEY.user_id, session_id=KEY.session_id,
                         projection_wait_s=0.3, **overrides)  # fmt: skip
    return await agent.next_request("你是旅行助手。")


@pytest.mark.parametrize(
    "overrides",
    [{"add_session_summary": False}, {"summary_formatter": lambda _: ""}],
    ids=["summary-off", "renders-nothing"],
)
async def test_every_event_is_in_the_request_when_the_summary_is_not_shown(overrides: dict[str, Any]) -> None:
    events, summary = _session()
    reader = FakeContextReader(events, summary)
    request = await _request(reader, **overrides)
    assert unaccounted(request.messages, events) == []
    assert request.summary is None and not request.read_truncated
    assert reader.full_reads[-1] is True


async def test_with_the_summary_shown_the_read_stays_cut_at_its_boundary() -> None:
    events, summary = _session()
    reader = FakeContextReader(events, summary)
    request = await _request(reader)
    assert unaccounted(request.messages, events[4:]) == []
    assert marker(1) not in str(request.messages) and "前两轮：杭州行程" in request.messages[0]["content"]
    assert request.summary is not None and reader.full_reads == [False, False]


def _cap_note(request: AgentRequest) -> str:
    notes = [m["content"] for m in request.messages if READ_CAP_MARK in str(m.get("content"))]
    assert len(notes) == 1, "the request itself says what the read left out"
    note = str(notes[0])
    return note[note.index(READ_CAP_MARK) : note.index("]", note.index(READ_CAP_MARK)) + 1]


async def test_a_full_read_stopped_by_its_event_cap_is_reported() -> None:
    events, summary = _session()
    request = await _request(FakeContextReader(events, summary, max_events=7), add_session_summary=False)
    assert request.read_truncated
    assert unaccounted(request.messages, events[2:]) == []
    # The oldest two events are in neither the request nor a summary: the request says so, from where on.
    note = _cap_note(request)
    assert f"before event_id={events[2].event_id}" in note and 'session_load(event_id="e3", before=4)' in note
    assert marker(1) not in str(request.messages)


async def test_a_read_after_the_boundary_stopped_by_its_event_cap_is_noted_in_the_request() -> None:
    """More events after the boundary than the read takes (20 000 by default): the oldest of them are in
    no summary and not read; the request names where its history starts."""
    events, summary = _session()
    request = await _request(FakeContextReader(events, summary, max_events=3))
    assert request.read_truncated and request.summary is not None
    note = _cap_note(request)
    assert f"after the summary's boundary before event_id={events[6].event_id}" in note


async def test_a_whole_read_has_no_cap_note() -> None:
    events, summary = _session()
    request = await _request(FakeContextReader(events, summary), add_session_summary=False)
    assert not request.read_truncated and READ_CAP_MARK not in str(request.messages)
