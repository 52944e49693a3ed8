"""Replay epochs against the promise: after a switch every event is in the served chain or in the request.

A live worker and a projector run; the scripted model echoes every marker of its
request, so a summary holds exactly the markers of what its chain read. A session
is summarized live, then ``distill replay --from-latest`` runs while the session
keeps going (the replay reads only what arrives after its start) and a second session
begins. The run switches the sessions it summarized where their chains start with them:
the new session, not the old one (its chain lacks what came before the run's start, and
``distill epochs adopt --force`` must not switch it either). Oracle: once the projector has applied everything the
summaries topic holds for the session, every marker of every event of it is in
the served summary or among the events of the read the next request is built from.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from projections.context_read import ContextReader
from schemas import EpochAdopted, SessionKey, SessionSummary
from schemas.reads import ContextRead
from schemas.settings import Settings
from streams.app.decoding import decode_summary_record
from streams.client import DistillClient
from tests.integration.pipeline_support import (
    DISTILL,
    SessionBuilder,
    marker_echo_pipeline,
    read_topic,
    replay_output,
    start_replay,
    worker_env,
)
from tests.support.keyspaces import KeyspacePool
from tests.support.markers import MarkerBook

pytestmark = pytest.mark.integration

ROUNDS = 4  # 8 events, event threshold 3: two live boundaries before the replay starts


@pytest.fixture(scope="module")
def pipeline(
    service_settings: Settings, keyspaces: KeyspacePool, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Settings, Any]]:
    with marker_echo_pipeline(service_settings, keyspaces, tmp_path_factory.mktemp("replay-history")) as running:
        yield running


def round_of(book: MarkerBook, b: SessionBuilder, r: int) -> list[Any]:
    question = b.user(f"第{r}个问题{book.mint(f'{b.session}-e{b.n + 1}')}：订单ORDER{r}怎么退款？")
    return [question, b.assistant(f"第{r}个回答{book.mint(f'{b.session}-e{b.n + 1}')}。")]


def served_per_topic(records: list[Any], key: SessionKey) -> tuple[int, int]:
    """The ``(epoch, version)`` the summaries topic says the session's full-session key is served at."""
    epoch, version = 0, 0
    for record in records:
        if record.value is None:
            continue
        try:
            found = decode_summary_record(record.value)
        except ValueError:
            continue
        if isinstance(found, EpochAdopted) and found.session_key == key:
            epoch = found.epoch
            version = next((h.summary.version for h in found.heads if h.summary.filter_key == ""), 0)
        elif isinstance(found, SessionSummary) and (found.session_key, found.filter_key, found.epoch) == (
            key, "", epoch):  # fmt: skip
            version = max(version, found.version)
    return epoch, version


async def settled_read(settings: Settings, cql: Any, key: SessionKey, timeout: float = 90.0) -> ContextRead:
    """The read once the projector serves what the summaries topic holds for the session (and nothing moves)."""
    reader = ContextReader(cql, settings.cassandra.keyspace)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        wanted = served_per_topic(await read_topic(settings, settings.topics.summaries, timeout=10), key)
        read = await reader.read(key)
        got = (read.served_epoch, read.summary.version if read.summary is not None else 0)
        if got == wanted:
            await asyncio.sleep(3)  # a job still in flight would add a summary: look again
            again = served_per_topic(await read_topic(settings, settings.topics.summaries, timeout=10), key)
            if again == wanted:
                return read
        if loop.time() > deadline:
            pytest.fail(f"the projector serves {got} of {'/'.join(key)}, the summaries topic says {wanted}")
        await asyncio.sleep(1)


def unaccounted(book: MarkerBook, session: str, read: ContextRead) -> dict[str, list[str]]:
    """Event id → its markers in neither the served summary nor the read's events."""
    texts = [read.summary.summary] if read.summary is not None else []
    texts += [e.message.content or "" for e in read.events]
    out: dict[str, list[str]] = {}
    for event_id, markers in book.by_event.items():
        if event_id.startswith(f"{session}-"):
            lost = [m for m in markers if not any(m in t for t in texts)]
            if lost:
                out[event_id] = lost
    return out


async def test_a_replay_from_latest_never_serves_a_session_a_summary_chain_without_its_earlier_history(
    pipeline: tuple[Settings, Any],
) -> None:
    settings, cql = pipeline
    book = MarkerBook()
    b = SessionBuilder(app="hist")
    key = SessionKey(b.app_name, b.user_id, b.session)
    async with DistillClient(settings) as client:
        await client.publish_many([e for r in range(ROUNDS) for e in round_of(book, b, r)])

    def live_done(records: list[Any]) -> bool:
        return served_per_topic(records, key) == (0, 2)

    await read_topic(settings, settings.topics.summaries, until=live_done, timeout=90)
    await settled_read(settings, cql, key)

    # The replay reads only what arrives after its start; the session goes on meanwhile, and another begins.
    c = SessionBuilder(app="hist")
    later = SessionKey(c.app_name, c.user_id, c.session)
    proc = start_replay(settings, "--adopt", "--from-latest", "--idle-exit", "8", "--session", b.session,
                        "--session", c.session)  # fmt: skip
    assert proc.stdout is not None
    first = await asyncio.to_thread(proc.stdout.readline)  # printed once the run's start offsets are committed
    assert "started" in first, first
    async with DistillClient(settings) as client:
        await client.publish_many([e for r in range(ROUNDS, ROUNDS + 2) for e in round_of(book, b, r)])
        await client.publish_many([e for r in range(3) for e in round_of(book, c, r)])
    out = first + await asyncio.to_thread(replay_output, proc)
    assert "done: 10 events" in out, out
    epoch = re.search(r"\(epoch (\d+)\)", out)
    assert epoch is not None, out

    # The session that began after the run started is served from its epoch, and loses nothing.
    records = await read_topic(settings, settings.topics.summaries, timeout=10)
    assert served_per_topic(records, later)[0] == int(epoch.group(1)), out
    read = await settled_read(settings, cql, later)
    assert read.served_epoch == int(epoch.group(1)) and unaccounted(book, c.session, read) == {}, (out, read.summary)

    # The older one is not: its chain in the epoch starts at the run's start.
    assert f"{'/'.join(key)}: EpochMissingHistory" in out, out
    read = await settled_read(settings, cql, key)
    assert read.served_epoch == 0, out
    assert unaccounted(book, b.session, read) == {}, (out, read.served_epoch, read.summary)

    # Nor can an operator switch it to that epoch by hand, not even with --force.
    refused = await asyncio.to_thread(
        subprocess.run, [DISTILL, "epochs", "adopt", epoch.group(1), "--force", "--session", "/".join(key)],
        env=worker_env(settings), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert refused.returncode != 0 and "EpochMissingHistory" in refused.stdout, refused.stdout + refused.stderr
    read = await settled_read(settings, cql, key)
    assert unaccounted(book, b.session, read) == {}, (read.served_epoch, read.summary)
