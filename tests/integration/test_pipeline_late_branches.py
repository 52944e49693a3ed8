"""Late, tied and re-published events on branches, end to end: every marker is in the request of its keys.

A live worker and a projector run over real Kafka and Cassandra; the scripted model
echoes every marker of its request, so a summary holds exactly the markers its chain
read. One session has a root agent (``lt``) and two sub-agents (``lt/a``, ``lt/b``)
beside keyless user turns. After the first summaries its producers go wrong the ways
the promise names: events stamped before the boundary (a clock behind, a sub-agent
flushing late), a batch stamped with one instant, and events already summarized
published again. Then every key is summarized once more (forced), so each boundary is
at its key's last event. Oracle, per key: the request a ``ContextReader`` read builds
(``assemble_from_read``: the key's summary or its ancestor's, and the events after its
boundary) holds the marker of every event on the key's line of ancestry.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from projections.context_read import ContextReader
from projections.filter_keys import related
from schemas import SessionEvent, SessionKey, Summarize
from schemas.settings import Settings
from streams.client import DistillClient
from streams.context import AssemblyOptions, assemble_from_read
from tests.integration.pipeline_support import SessionBuilder, marker_echo_pipeline
from tests.support.keyspaces import KeyspacePool
from tests.support.markers import MarkerBook, find_markers

pytestmark = pytest.mark.integration

KEYS = ("", "lt", "lt/a", "lt/b")
BRANCHES = ("lt", "lt/a", "lt/b")


@pytest.fixture(scope="module")
def pipeline(
    service_settings: Settings, keyspaces: KeyspacePool, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Settings, Any]]:
    with marker_echo_pipeline(service_settings, keyspaces, tmp_path_factory.mktemp("late-branches")) as running:
        yield running


class Scenario:
    """The session's events, each with a marker; late ones are stamped back without moving the clock."""

    def __init__(self) -> None:
        self.b = SessionBuilder(app="lt")
        self.book = MarkerBook()
        self.events: dict[str, SessionEvent] = {}
        self.logged: list[str] = []
        """Event ids in the order they were first published (the log's)."""

    def published(self, events: list[SessionEvent]) -> list[SessionEvent]:
        self.logged.extend(e.event_id for e in events if e.event_id not in self.logged)
        return events

    @property
    def key(self) -> SessionKey:
        return SessionKey(self.b.app_name, self.b.user_id, self.b.session)

    def _keep(self, event: SessionEvent) -> SessionEvent:
        self.events[event.event_id] = event
        return event

    def user(self, text: str, *, gap_s: float = 1.0) -> SessionEvent:
        marker = self.book.mint(f"{self.b.session}-e{self.b.n + 1}")
        return self._keep(self.b.user(f"{text} {marker}", gap_s=gap_s))

    def say(self, key: str, text: str, *, gap_s: float = 1.0, back_s: float = 0.0) -> SessionEvent:
        marker = self.book.mint(f"{self.b.session}-e{self.b.n + 1}")
        event = self.b.assistant(f"{text} {marker}", filter_key=key, gap_s=gap_s)
        if back_s:
            event = event.model_copy(update={"timestamp": event.timestamp - timedelta(seconds=back_s)})
        return self._keep(event)

    def round(self, r: int) -> list[SessionEvent]:
        return [self.user(f"第{r}个问题：订单ORDER{r}怎么退款？"), self.say(BRANCHES[r % 3], f"第{r}个回答。"),
                self.say(BRANCHES[(r + 1) % 3], f"子任务{r}完成。")]  # fmt: skip

    def owed(self, filter_key: str) -> dict[str, list[str]]:
        """Event id → markers, for every event a request on ``filter_key`` must account for."""
        return {eid: self.book.markers_of(eid) for eid, e in self.events.items() if related(e.filter_key, filter_key)}


async def request_text(settings: Settings, cql: Any, sc: Scenario, filter_key: str) -> str:
    read = await ContextReader(cql, settings.cassandra.keyspace).read(sc.key, filter_key)
    request = assemble_from_read("sys", read, options=AssemblyOptions(add_session_summary=True))
    return "\n".join(str(m.get("content") or "") for m in request.messages)


async def missing(settings: Settings, cql: Any, sc: Scenario) -> dict[str, dict[str, list[str]]]:
    out: dict[str, dict[str, list[str]]] = {}
    for filter_key in KEYS:
        found = set(find_markers(await request_text(settings, cql, sc, filter_key)))
        lost = {eid: [m for m in ms if m not in found] for eid, ms in sc.owed(filter_key).items()}
        lost = {eid: ms for eid, ms in lost.items() if ms}
        if lost:
            out[filter_key or "(session)"] = lost
    return out


async def settled(settings: Settings, cql: Any, sc: Scenario, want_summaries: bool, timeout: float = 120.0) -> None:
    """Wait until every key's request accounts for every marker and (``want_summaries``) each key's summary
    holds those logged up to its boundary (the forced passes landed: a branch's ends at its own subtree's last
    event, an ancestor's event after it stays in the request); fail naming what is missing."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    note: Any = None
    while True:
        lost = await missing(settings, cql, sc)
        done = not lost
        if done and want_summaries:
            for filter_key in KEYS:
                read = await ContextReader(cql, settings.cassandra.keyspace).read(sc.key, filter_key)
                held = set(find_markers(read.summary.summary)) if read.summary is not None else set()
                upto = sc.logged.index(read.summary.boundary.last_event_id or "") if read.summary is not None else -1
                covered = set(sc.logged[: upto + 1])
                absent = {eid: ms for eid, ms in sc.owed(filter_key).items()
                          if eid in covered and any(m not in held for m in ms)}  # fmt: skip
                if absent:
                    done = False
                    note = (
                        filter_key,
                        read.summary.filter_key if read.summary else None,
                        read.summary.boundary if read.summary else None,
                        absent,
                    )
        if done:
            return
        if loop.time() > deadline:
            pytest.fail(f"markers in no request: {lost}" if lost else f"the forced summaries did not land: {note}")
        await asyncio.sleep(1)


async def test_late_tied_and_published_again_events_on_branches_stay_in_every_request(
    pipeline: tuple[Settings, Any],
) -> None:
    settings, cql = pipeline
    sc = Scenario()
    async with DistillClient(settings) as client:
        first = [e for r in range(4) for e in sc.round(r)]
        await client.publish_many(sc.published(first))
        await settled(settings, cql, sc, want_summaries=False)

        # A sub-agent flushing late and a clock behind: stamped before the events (and boundaries) logged
        # before them; a batch stamped with one instant; a summarized event and a late one published again.
        late = [sc.say("lt/a", "迟到的子任务结果", back_s=30), sc.say("lt/b", "时钟慢的回答", back_s=20),
                sc.user("插队的问题", gap_s=0), sc.say("lt", "同一时刻的回答", gap_s=0),
                sc.say("lt/b", "同一时刻的子任务", gap_s=0)]  # fmt: skip
        await client.publish_many(sc.published([*late, first[1], first[4]]))
        more = [e for r in range(4, 6) for e in sc.round(r)]
        await client.publish_many(sc.published([*more, late[0], sc.say("lt/a", "又一个迟到的结果", back_s=45)]))
        await settled(settings, cql, sc, want_summaries=False)

        for filter_key in ("lt/a", "lt/b", "lt", ""):
            await client.publish(Summarize(app_name=sc.b.app_name, user_id=sc.b.user_id, session_id=sc.b.session,
                                           filter_key=filter_key, force=True, command_id=uuid.uuid4().hex))  # fmt: skip
    await settled(settings, cql, sc, want_summaries=True)
