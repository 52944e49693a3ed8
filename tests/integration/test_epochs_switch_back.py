"""Switching a session back to an epoch the live line has moved past loses no event.

A live worker and a projector run; the scripted model echoes every marker of its
request. A session (a root agent and a sub-agent beside keyless user turns) is
summarized live (epoch 0), replayed into epoch N and switched to it; the live worker
goes on summarizing it there. Then ``distill epochs adopt 0 --force`` takes it back to
epoch 0, whose heads are behind. Oracle, per key, right after the switch and after the
next pass on epoch 0: the request a context read builds holds every marker of every
event on the key's line of ancestry (in the summary it injects or among the events
after its boundary), and the summaries made after the switch hold every marker up
to their boundary.
"""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from projections.context_read import ContextReader
from projections.filter_keys import related
from schemas import SessionEvent, SessionKey, Summarize
from schemas.settings import Settings
from streams.client import DistillClient
from streams.context import AssemblyOptions, assemble_from_read
from tests.integration.pipeline_support import (
    DISTILL,
    SessionBuilder,
    marker_echo_pipeline,
    worker_env,
)
from tests.support.keyspaces import KeyspacePool
from tests.support.markers import MarkerBook, find_markers

pytestmark = pytest.mark.integration

KEYS = ("", "sb", "sb/a")


@pytest.fixture(scope="module")
def pipeline(
    service_settings: Settings, keyspaces: KeyspacePool, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Settings, Any]]:
    with marker_echo_pipeline(service_settings, keyspaces, tmp_path_factory.mktemp("switch-back")) as running:
        yield running


def distill(settings: Settings, *args: str, timeout: float = 150) -> str:
    done = subprocess.run([DISTILL, *args], env=worker_env(settings), capture_output=True, text=True,
                          timeout=timeout, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


class Scenario:
    def __init__(self) -> None:
        self.b = SessionBuilder(app="sb")
        self.book = MarkerBook()
        self.events: list[SessionEvent] = []

    @property
    def key(self) -> SessionKey:
        return SessionKey(self.b.app_name, self.b.user_id, self.b.session)

    def rounds(self, start: int, stop: int) -> list[SessionEvent]:
        out = []
        for r in range(start, stop):
            out.append(self.b.user(f"第{r}个问题 {self.book.mint(f'{self.b.session}-e{self.b.n + 1}')}"))
            key = "sb/a" if r % 2 else "sb"
            out.append(self.b.assistant(f"第{r}个回答 {self.book.mint(f'{self.b.session}-e{self.b.n + 1}')}",
                                        filter_key=key))  # fmt: skip
        self.events.extend(out)
        return out


async def accounted(settings: Settings, cql: Any, sc: Scenario, epoch: int, version_at_least: int = 1) -> int:
    """Waits until the full session is served from ``epoch`` at ``version_at_least`` or later and every key's
    request holds every marker; returns the served version (fails naming the markers in no request)."""
    reader = ContextReader(cql, settings.cassandra.keyspace)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 120
    while True:
        lost: dict[str, Any] = {}
        full = await reader.read(sc.key, "")
        at = (full.served_epoch, full.summary.version if full.summary else 0)
        for filter_key in KEYS:
            read = await reader.read(sc.key, filter_key)
            request = assemble_from_read("sys", read, options=AssemblyOptions(add_session_summary=True))
            found = set(find_markers("\n".join(str(m.get("content") or "") for m in request.messages)))
            owed = [m for e in sc.events if related(e.filter_key, filter_key) for m in sc.book.markers_of(e.event_id)]
            if missing := [m for m in owed if m not in found]:
                lost[filter_key or "(session)"] = (read.served_epoch, read.summary, missing)
        if not lost and at[0] == epoch and at[1] >= version_at_least:
            return at[1]
        if loop.time() > deadline:
            pytest.fail(f"served at {at}, wanted epoch {epoch} v{version_at_least}+; markers in no request: {lost}")
        await asyncio.sleep(1)


async def test_switching_back_to_an_epoch_the_live_line_moved_past_loses_no_event(
    pipeline: tuple[Settings, Any],
) -> None:
    settings, cql = pipeline
    sc = Scenario()
    session = "/".join(sc.key)
    async with DistillClient(settings) as client:
        await client.publish_many(sc.rounds(0, 4))
    await accounted(settings, cql, sc, epoch=0)

    out = await asyncio.to_thread(distill, settings, "replay", "--idle-exit", "2", "--session", sc.b.session)
    assert "1 sessions switched" in out, out
    epoch = int(out.split("(epoch ", 1)[1].split(")", 1)[0])
    switched = await accounted(settings, cql, sc, epoch=epoch)

    async with DistillClient(settings) as client:  # the live line goes on in the replay's epoch
        await client.publish_many(sc.rounds(4, 8))
        await force(client, sc)
    await accounted(settings, cql, sc, epoch=epoch, version_at_least=switched + 1)

    out = await asyncio.to_thread(distill, settings, "epochs", "adopt", "0", "--force", "--session", session)
    assert "epoch 0: 1 sessions switched" in out, out
    back = await accounted(settings, cql, sc, epoch=0)

    async with DistillClient(settings) as client:  # the next passes roll epoch 0's heads forward
        await client.publish_many(sc.rounds(8, 10))
        await force(client, sc)
    await accounted(settings, cql, sc, epoch=0, version_at_least=back + 1)
    read = await ContextReader(cql, settings.cassandra.keyspace).read(sc.key, "")
    assert read.summary is not None and read.summary.boundary.last_event_id == sc.events[-1].event_id
    held = set(find_markers(read.summary.summary))
    assert [m for e in sc.events for m in sc.book.markers_of(e.event_id) if m not in held] == []


async def force(client: DistillClient, sc: Scenario) -> None:
    """A forced pass of every key (the branch first: the full session's then ends at the last event)."""
    for filter_key in ("sb/a", "sb", ""):
        await client.publish(Summarize(app_name=sc.b.app_name, user_id=sc.b.user_id, session_id=sc.b.session,
                                       filter_key=filter_key, force=True, command_id=uuid.uuid4().hex))  # fmt: skip
