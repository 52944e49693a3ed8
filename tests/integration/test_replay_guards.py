"""``distill replay`` on the real Kafka: epoch numbers under concurrency, and a resume after an adoption.

Two replays of the same sessions are started at the same moment (``--no-adopt``:
no live worker is needed to build epochs). Each must get its own epoch number,
so each epoch is one run's topic and every session's summaries of an epoch come
from one run. The scripted model echoes the markers of its request: a session's
summaries carry its own markers only.

Then one session adopts the first run's epoch (the ``EpochAdopted`` record a live
worker writes on the summaries topic), both sessions get more events, and the
first run is resumed: it names the adopted session and leaves it alone (the live
worker continues that line of the epoch), and catches the other one up.

Then, a replay against a slow model with a short ``--idle-exit`` must still wait for
its summaries: the events are consumed long before the model answers. A replay of an empty topic,
and one ``--from-latest`` with the history left alone, end once idle.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from schemas import AdoptedHead, EpochAdopted, SessionKey, SessionSummary
from schemas.settings import Settings
from streams.cli.epochs_admin import epoch_heads, replay_epochs
from streams.client import DistillClient
from streams.clients.kafka_config import producer_kwargs
from tests.integration.pipeline_support import (
    SessionBuilder,
    create_topics,
    marker_echo,
    read_topic,
    replay_log_tail,
    replay_output,
    scripted_pipeline_settings,
    start_replay,
    summaries_of,
)
from tests.support.markers import MarkerBook, find_markers
from tests.support.openai_server import OpenAIServer, delayed, request_text

pytestmark = pytest.mark.integration

ROUNDS = 4  # 8 events per session, event threshold 3: two boundaries each


@dataclass
class Run:
    run_id: str
    epoch: int
    topic: str
    out: str


@dataclass
class Fixture:
    settings: Settings
    book: MarkerBook
    builders: list[SessionBuilder]
    runs: list[Run]


def finished(proc: subprocess.Popen[str]) -> Run:
    out = replay_output(proc)
    started = re.search(r"replay (\S+) (?:started|resumed) \(epoch (\d+)\)", out)
    topic = re.search(r"→ (\S+)", out.splitlines()[-1])
    assert started is not None and topic is not None, out
    return Run(started.group(1), int(started.group(2)), topic.group(1), out)


def round_of(book: MarkerBook, b: SessionBuilder, r: int) -> list[Any]:
    question = b.user(f"第{r}个问题{book.mint(f'{b.session}-e{b.n + 1}')}：缓存怎么失效？")
    return [question, b.assistant(f"第{r}个回答{book.mint(f'{b.session}-e{b.n + 1}')}。")]


@pytest.fixture(scope="module")
def started(service_settings: Settings) -> Iterator[Fixture]:
    with OpenAIServer(default=marker_echo) as llm:
        settings = scripted_pipeline_settings(service_settings, llm.base_url, partitions=2, event_threshold=3)
        asyncio.run(create_topics(settings))
        book = MarkerBook()
        builders = [SessionBuilder(app="guard") for _ in range(2)]

        async def publish() -> None:
            async with DistillClient(settings) as client:
                await client.publish_many([e for r in range(ROUNDS) for b in builders for e in round_of(book, b, r)])

        asyncio.run(publish())
        procs = [start_replay(settings), start_replay(settings)]  # at the same moment
        yield Fixture(settings, book, builders, [finished(p) for p in procs])


def by_session(records: list[Any]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for s in sorted(summaries_of(records), key=lambda s: (s["session_id"], s["filter_key"], s["version"])):
        out.setdefault(s["session_id"], []).append(s)
    return out


def own_markers_only(book: MarkerBook, session: str, summaries: list[dict[str, Any]]) -> bool:
    own = {m for e, ms in book.by_event.items() if e.startswith(f"{session}-") for m in ms}
    return all(set(find_markers(s["summary"])) <= own for s in summaries)


async def test_replays_started_at_the_same_moment_build_distinct_epochs_each_from_one_run(started: Fixture) -> None:
    settings, runs = started.settings, started.runs
    assert len({r.epoch for r in runs}) == 2, [r.out for r in runs]
    assert {e: ts for e, ts in (await replay_epochs(settings)).items()} == {r.epoch: [r.topic] for r in runs}
    for run in runs:
        mine = by_session(await read_topic(settings, run.topic, timeout=10))
        assert set(mine) == {b.session for b in started.builders}
        for session, summaries in mine.items():
            assert [(s["epoch"], s["version"]) for s in summaries] == [(run.epoch, 1), (run.epoch, 2)], summaries
            assert own_markers_only(started.book, session, summaries)
        heads = await epoch_heads(settings, run.epoch)
        assert {k.session_id: h.heads[""].summary.summary for k, h in heads.items()} == {
            session: summaries[-1]["summary"] for session, summaries in mine.items()}  # fmt: skip


async def test_a_resume_leaves_the_sessions_that_adopted_its_epoch_to_the_live_worker(started: Fixture) -> None:
    settings, book, (adopted, other) = started.settings, started.book, started.builders
    run = min(started.runs, key=lambda r: r.epoch)
    before = by_session(await read_topic(settings, run.topic, timeout=10))
    head = SessionSummary.model_validate(before[adopted.session][-1])
    key = SessionKey(adopted.app_name, adopted.user_id, adopted.session)
    switch = EpochAdopted(
        app_name=key.app_name, user_id=key.user_id, session_id=key.session_id, epoch=run.epoch, previous_epoch=0,
        heads=(AdoptedHead(summary=head),), command_id="c-guard", created_at=datetime.now(UTC),
    )  # fmt: skip
    producer = AIOKafkaProducer(**producer_kwargs(settings.kafka))
    await producer.start()
    try:  # what the live worker writes when the session adopts the epoch
        await producer.send_and_wait(settings.topics.summaries, switch.model_dump_json().encode(), key=key.kafka_key())
    finally:
        await producer.stop()
    async with DistillClient(settings) as client:
        await client.publish_many([e for r in range(ROUNDS, ROUNDS + 2) for b in (adopted, other)
                                   for e in round_of(book, b, r)])  # fmt: skip

    resumed = await asyncio.to_thread(finished, start_replay(settings, "--resume", run.run_id))
    assert resumed.epoch == run.epoch and resumed.topic == run.topic
    after = by_session(await read_topic(settings, run.topic, timeout=10))
    assert after[adopted.session] == before[adopted.session]  # nothing more of the adopted line
    assert f"not resumed: 1 sessions already adopted epoch {run.epoch}" in resumed.out, resumed.out
    assert "/".join(key) in resumed.out and other.session not in resumed.out
    assert [s["version"] for s in after[other.session]] == [1, 2, 3]
    last = after[other.session][-1]
    assert last["epoch"] == run.epoch and last["boundary"]["last_event_id"] == f"{other.session}-e{2 * (ROUNDS + 2)}"
    assert own_markers_only(book, other.session, after[other.session])


def test_a_replay_waits_for_its_model_calls_before_it_ends(service_settings: Settings) -> None:
    """Every event consumed and nothing new for longer than ``--idle-exit`` while the model is still
    answering: the run is not done (it used to stop there, with its summaries missing)."""
    with OpenAIServer(default=delayed(marker_echo, 6.0)) as llm:
        settings = scripted_pipeline_settings(service_settings, llm.base_url, partitions=2, event_threshold=3)
        asyncio.run(create_topics(settings))
        book = MarkerBook()
        b = SessionBuilder(app="slowreplay")

        async def publish() -> None:
            async with DistillClient(settings) as client:
                await client.publish_many([e for r in range(ROUNDS) for e in round_of(book, b, r)])

        asyncio.run(publish())
        run = finished(start_replay(settings, "--idle-exit", "1"))
        summaries = by_session(asyncio.run(read_topic(settings, run.topic, timeout=10)))
        assert [s["version"] for s in summaries.get(b.session, [])] == [1, 2], run.out
        assert len(llm.requests) == 2


def test_a_replay_of_an_empty_events_topic_ends_with_nothing_to_do(service_settings: Settings) -> None:
    """Nothing to replay is done once idle: it used to wait for a first committed event until
    ``--timeout`` (an hour by default)."""
    with OpenAIServer(default=marker_echo) as llm:
        settings = scripted_pipeline_settings(service_settings, llm.base_url, partitions=2, event_threshold=3)
        asyncio.run(create_topics(settings))
        started = time.monotonic()
        run = finished(start_replay(settings, "--idle-exit", "1", "--timeout", "90"))
        assert "done: 0 events, 0 summaries" in run.out, run.out
        assert time.monotonic() - started < 60, run.out


def test_a_replay_from_latest_summarizes_only_what_arrives_after_its_start_and_then_ends(
    service_settings: Settings,
) -> None:
    """``--from-latest``: the history already on the topic is not replayed, what is published after the
    command started is, and the run ends once idle (it used to wait for ``--timeout``: its group had
    committed nothing, so it never looked done)."""
    with OpenAIServer(default=marker_echo) as llm:
        settings = scripted_pipeline_settings(service_settings, llm.base_url, partitions=2, event_threshold=3)
        asyncio.run(create_topics(settings))
        book = MarkerBook()
        old, new = SessionBuilder(app="latest"), SessionBuilder(app="latest")

        async def publish(b: SessionBuilder) -> None:
            async with DistillClient(settings) as client:
                await client.publish_many([e for r in range(ROUNDS) for e in round_of(book, b, r)])

        asyncio.run(publish(old))
        began = time.monotonic()
        proc = start_replay(settings, "--from-latest", "--idle-exit", "8", "--timeout", "90")
        assert proc.stdout is not None
        first = proc.stdout.readline()  # printed once the run's start offsets are committed
        assert "started" in first, first
        asyncio.run(publish(new))
        rest, _ = proc.communicate(timeout=120)
        out = first + rest
        assert proc.returncode == 0, f"{replay_log_tail(out)}\n--- replay output ---\n{out}"
        assert time.monotonic() - began < 80, out
        topic = re.search(r"→ (\S+)", out.splitlines()[-1])
        assert topic is not None, out
        assert f"done: {2 * ROUNDS} events, 2 summaries" in out, out
        summaries = by_session(asyncio.run(read_topic(settings, topic.group(1), timeout=10)))
        assert set(summaries) == {new.session}, summaries
        assert [s["version"] for s in summaries[new.session]] == [1, 2]
        assert own_markers_only(book, new.session, summaries[new.session])
        history = {m for e, ms in book.by_event.items() if e.startswith(f"{old.session}-") for m in ms}
        sent = {m for r in llm.requests for m in find_markers(request_text(r.body))}
        assert history and not history & sent
