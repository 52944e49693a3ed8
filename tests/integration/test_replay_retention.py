"""A replay from the beginning after Kafka's retention dropped a session's first records.

A live worker and a projector run; the scripted model echoes every marker of its
request, so a summary holds exactly the markers of what its chain read. A session
is summarized live, then the first records of its partition are deleted (what
retention does) and ``distill replay`` runs from the beginning: its summaries of
the session roll forward nothing of the deleted records, yet they reach the live
line's boundary. Switching the session to them (as ``distill replay`` does, or
``distill epochs adopt --force``) would serve a summary without the earliest
history while the request is cut at its boundary. Oracle: once the projector has
applied everything the summaries topic holds for the session, every marker of
every event is in the served summary or in the request built from the read.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete

from schemas import SessionKey
from schemas.reads import ContextRead
from schemas.settings import Settings
from streams.client import DistillClient
from streams.clients.kafka_config import common_kwargs
from streams.context import AssemblyOptions, assemble_from_read
from tests.integration.pipeline_support import (
    DISTILL,
    SessionBuilder,
    live_pipeline,
    marker_echo,
    read_topic,
    replay_output,
    scripted_pipeline_settings,
    start_replay,
    summaries_of,
    worker_env,
)
from tests.integration.test_replay_history import round_of, served_per_topic, settled_read
from tests.support.keyspaces import KeyspacePool
from tests.support.markers import MarkerBook
from tests.support.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

ROUNDS = 4  # 8 events at offsets 0..7, event threshold 3: live boundaries at e4 and e8
DROPPED = 4  # retention drops offsets 0..3 (e1..e4): the replay's chain starts at e5, and still reaches e8


@pytest.fixture(scope="module")
def pipeline(
    service_settings: Settings, keyspaces: KeyspacePool, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Settings, Any]]:
    with OpenAIServer(default=marker_echo) as llm:
        settings = scripted_pipeline_settings(service_settings, llm.base_url, partitions=1, event_threshold=3)
        keyspace = keyspaces.lease()
        try:
            with live_pipeline(settings, keyspace, tmp_path_factory.mktemp("replay-retention")) as cql:
                yield settings, cql
        finally:
            keyspaces.release(keyspace)


async def drop_first_records(settings: Settings, before: int) -> None:
    """What retention does: the events partition's records before offset ``before`` are gone."""
    admin = AIOKafkaAdminClient(**common_kwargs(settings.kafka))
    await admin.start()
    try:
        low = await admin.delete_records({TopicPartition(settings.topics.events, 0): RecordsToDelete(before)})
        assert low == {TopicPartition(settings.topics.events, 0): before}, low
    finally:
        await admin.close()


def unrequested(book: MarkerBook, session: str, read: ContextRead) -> dict[str, list[str]]:
    """Event id → its markers the request built from ``read`` neither shows nor summarizes."""
    request = assemble_from_read("sys", read, options=AssemblyOptions(add_session_summary=True))
    text = json.dumps(request.messages, ensure_ascii=False)
    return {e: lost for e, markers in book.by_event.items() if e.startswith(f"{session}-")
            if (lost := [m for m in markers if m not in text])}  # fmt: skip


async def test_a_replay_after_retention_dropped_a_sessions_first_records_is_not_served_to_it(
    pipeline: tuple[Settings, Any],
) -> None:
    settings, cql = pipeline
    book = MarkerBook()
    b = SessionBuilder(app="retained")
    key = SessionKey(b.app_name, b.user_id, b.session)
    async with DistillClient(settings) as client:
        await client.publish_many([e for r in range(ROUNDS) for e in round_of(book, b, r)])

    def live_done(records: list[Any]) -> bool:
        return served_per_topic(records, key) == (0, 2)

    await read_topic(settings, settings.topics.summaries, until=live_done, timeout=90)
    read = await settled_read(settings, cql, key)
    assert unrequested(book, b.session, read) == {}, read.summary

    await drop_first_records(settings, DROPPED)
    proc = start_replay(settings, "--adopt", "--session", b.session)
    out = await asyncio.to_thread(replay_output, proc)
    topic = re.search(r"output (\S+),", out)
    epoch = re.search(r"\(epoch (\d+)\)", out)
    assert topic is not None and epoch is not None, out
    # The replay's chain starts at the first record it could read, and reaches the live boundary.
    replayed = [s for s in summaries_of(await read_topic(settings, topic.group(1), min_records=1, timeout=30))
                if s["session_id"] == b.session and s["filter_key"] == ""]  # fmt: skip
    assert replayed and replayed[-1]["boundary"]["last_event_id"] == f"{b.session}-e{2 * ROUNDS}", replayed

    read = await settled_read(settings, cql, key)
    assert unrequested(book, b.session, read) == {}, (out, read.served_epoch, read.summary)
    assert read.served_epoch == 0 and "EpochMissingHistory" in out, out
    assert replayed[-1].get("chain_from_offset") == DROPPED, replayed[-1]

    # Nor does an operator's --force switch the session: no later pass would read e1..e4 again.
    forced = await asyncio.to_thread(
        subprocess.run, [DISTILL, "epochs", "adopt", epoch.group(1), "--force", "--session", "/".join(key)],
        env=worker_env(settings), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    said = forced.stdout + forced.stderr
    assert forced.returncode != 0 and "EpochMissingHistory" in said and "starts at events offset 4" in said, said
    read = await settled_read(settings, cql, key)
    assert unrequested(book, b.session, read) == {}, (read.served_epoch, read.summary)
    assert read.served_epoch == 0
