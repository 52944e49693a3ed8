"""An epoch head from before a ``delete_session`` is never served as the session's summary.

A live worker and a projector run; the scripted model echoes every marker of its request. A
session is summarized live (epoch 0) and replayed into epoch N without switching (``--no-adopt``):
N's heads cover the session's history as it was. Then the session is deleted, part of its history
is imported again (same event ids, same timestamps: a restore) and it goes on. Then
``distill epochs adopt N --force`` asks for the switch to the pre-deletion heads. Oracle, per key,
after the switch and after the next passes: the request a context read builds holds every marker of
every event published since the deletion (in the summary it injects or among the events after its
boundary: a pre-deletion head's boundary must not hide the re-imported events), and no marker of an
event deleted and not imported again appears in any request or summary (deleted history does not
come back).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from projections.context_read import ContextReader
from projections.filter_keys import related
from schemas import DeleteSession, SessionEvent
from schemas.settings import Settings
from streams.client import DistillClient
from streams.context import AssemblyOptions, assemble_from_read
from tests.integration.pipeline_support import marker_echo_pipeline
from tests.integration.test_epochs_switch_back import KEYS, Scenario, distill, force
from tests.support.keyspaces import KeyspacePool
from tests.support.markers import find_markers

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def pipeline(
    service_settings: Settings, keyspaces: KeyspacePool, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Settings, Any]]:
    with marker_echo_pipeline(service_settings, keyspaces, tmp_path_factory.mktemp("epoch-delete")) as running:
        yield running


async def served(
    settings: Settings, cql: Any, sc: Scenario, live: list[SessionEvent], deleted: list[SessionEvent], *,
    epoch: int | None = None, last_event_id: str | None = None,
) -> None:  # fmt: skip
    """Waits until every key's request holds every marker of ``live`` on its line and none of ``deleted``
    (and, when given, the session is served from ``epoch`` with a full-session summary ending at
    ``last_event_id``); fails naming what is missing or back."""
    reader = ContextReader(cql, settings.cassandra.keyspace)
    gone = {m for e in deleted for m in sc.book.markers_of(e.event_id)}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 120
    while True:
        wrong: dict[str, Any] = {}
        full = await reader.read(sc.key, "")
        at = (full.served_epoch, full.summary.boundary.last_event_id if full.summary else None)
        for filter_key in KEYS:
            read = await reader.read(sc.key, filter_key)
            request = assemble_from_read("sys", read, options=AssemblyOptions(add_session_summary=True))
            found = set(find_markers("\n".join(str(m.get("content") or "") for m in request.messages)))
            owed = [m for e in live if related(e.filter_key, filter_key) for m in sc.book.markers_of(e.event_id)]
            missing = [m for m in owed if m not in found]
            back = sorted(found & gone)
            if missing or back:
                wrong[filter_key or "(session)"] = {"summary": read.summary, "missing": missing, "deleted back": back}
        settled = (epoch is None or at[0] == epoch) and (last_event_id is None or at[1] == last_event_id)
        if not wrong and settled:
            return
        if loop.time() > deadline:
            pytest.fail(f"served at {at}, wanted epoch {epoch} ending at {last_event_id}: {wrong}")
        await asyncio.sleep(1)


async def test_an_epoch_head_from_before_a_deletion_is_never_served(pipeline: tuple[Settings, Any]) -> None:
    settings, cql = pipeline
    sc = Scenario()
    session = "/".join(sc.key)
    before = sc.rounds(0, 4)
    async with DistillClient(settings) as client:
        await client.publish_many(before)
        await force(client, sc)
    await served(settings, cql, sc, before, [], epoch=0, last_event_id=before[-1].event_id)

    out = await asyncio.to_thread(
        distill, settings, "replay", "--no-adopt", "--idle-exit", "2", "--session", sc.b.session
    )
    epoch = int(out.split("(epoch ", 1)[1].split(")", 1)[0])
    assert epoch > 0, out

    restored, deleted = before[:4], before[4:]  # the first two rounds come back, the last two stay deleted
    async with DistillClient(settings) as client:
        await client.publish(DeleteSession(app_name=sc.b.app_name, user_id=sc.b.user_id, session_id=sc.b.session,
                                           command_id=uuid.uuid4().hex))  # fmt: skip
        await client.publish_many(restored)
        later = sc.rounds(4, 6)
        await client.publish_many(later)
    live = [*restored, *later]
    await served(settings, cql, sc, live, deleted)

    out = await asyncio.to_thread(distill, settings, "epochs", "adopt", str(epoch), "--force", "--session", session)
    print(out)
    # Switched or refused, the heads of the deleted history are not served, and the events since are shown.
    await served(settings, cql, sc, live, deleted)

    async with DistillClient(settings) as client:  # the next passes must not roll the deleted history forward
        more = sc.rounds(6, 8)
        await client.publish_many(more)
        await force(client, sc)
    live += more
    await served(settings, cql, sc, live, deleted, last_event_id=more[-1].event_id)
    read = await ContextReader(cql, settings.cassandra.keyspace).read(sc.key, "")
    assert read.summary is not None
    held = set(find_markers(read.summary.summary))
    assert [m for e in live for m in sc.book.markers_of(e.event_id) if m not in held] == []
    assert sorted(held & {m for e in deleted for m in sc.book.markers_of(e.event_id)}) == []
