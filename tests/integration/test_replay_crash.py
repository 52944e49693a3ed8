"""A replay killed mid-run (its worker and the command, SIGKILL) and resumed builds the epoch a clean run builds.

The scripted model echoes the markers of its request (the previous summary and the
delta): a session's last summary carries every marker that reached the model for it.
The oracle, per session:

* the resumed run's versions are 1..n, each once (no boundary summarized twice, none skipped);
* its boundaries and texts are those of a clean replay of the same log;
* its last summary covers the session's last event and holds the marker of every event.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import time
from typing import Any

import pytest

from schemas.settings import Settings
from streams.client import DistillClient
from tests.integration.pipeline_support import (
    ROOT,
    SessionBuilder,
    create_topics,
    marker_echo,
    read_topic,
    replay_output,
    scripted_pipeline_settings,
    start_replay,
    summaries_of,
)
from tests.support.markers import MarkerBook, find_markers
from tests.support.openai_server import OpenAIServer, delayed

pytestmark = pytest.mark.integration

SESSIONS = 6
ROUNDS = 8  # 16 events per session, event threshold 3: four boundaries each, the last on the last event


def replay(settings: Settings, *args: str) -> subprocess.Popen[str]:
    return start_replay(settings, "--llm-concurrency", "1", *args)


def chains(records: list[Any]) -> dict[str, list[tuple[int, str, str]]]:
    out: dict[str, list[tuple[int, str, str]]] = {}
    for s in sorted(summaries_of(records), key=lambda s: (s["session_id"], s["version"])):
        out.setdefault(s["session_id"], []).append((s["version"], s["boundary"]["last_event_id"], s["summary"]))
    return out


def publish_sessions(settings: Settings) -> tuple[MarkerBook, list[SessionBuilder]]:
    """``SESSIONS`` sessions of ``ROUNDS`` rounds (CJK, a marker per event), interleaved, on the events topic."""
    asyncio.run(create_topics(settings))
    book = MarkerBook()
    builders = [SessionBuilder(app="crashreplay") for _ in range(SESSIONS)]

    def round_of(b: SessionBuilder, r: int) -> list[Any]:
        question = b.user(f"第{r}个问题{book.mint(f'{b.session}-e{b.n + 1}')}：为什么重放要幂等？")
        return [question, b.assistant(f"第{r}个回答{book.mint(f'{b.session}-e{b.n + 1}')}。")]

    async def publish() -> None:
        async with DistillClient(settings) as client:
            await client.publish_many([e for r in range(ROUNDS) for b in builders for e in round_of(b, r)])

    asyncio.run(publish())
    return book, builders


def started_run(proc: subprocess.Popen[str]) -> tuple[str, list[int], str]:
    """The run id, worker pids and output topic from a replay's first line."""
    assert proc.stdout is not None
    first = proc.stdout.readline()
    started = re.search(r"replay (\S+) started \(epoch (\d+)\): worker pid ([\d, ]+), output (\S+),", first)
    assert started is not None, first
    return started.group(1), [int(p) for p in started.group(3).split(", ")], started.group(4)


def wait_partial(settings: Settings, topic: str, at_least: int = 5) -> list[dict[str, Any]]:
    def some(records: list[Any]) -> bool:
        return len(summaries_of(records)) >= at_least

    return summaries_of(asyncio.run(read_topic(settings, topic, until=some, timeout=60)))


def clean_chains(settings: Settings, llm_concurrency: int = 1) -> dict[str, list[tuple[int, str, str]]]:
    """What a clean replay of the same log (one worker) builds."""
    out = replay_output(start_replay(settings, "--llm-concurrency", str(llm_concurrency)))
    topic = re.search(r"→ (\S+)", out.splitlines()[-1])
    assert topic is not None, out
    return chains(asyncio.run(read_topic(settings, topic.group(1), timeout=10)))


def assert_the_promise_holds(
    got_chains: dict[str, list[tuple[int, str, str]]],
    clean: dict[str, list[tuple[int, str, str]]],
    book: MarkerBook,
    builders: list[SessionBuilder],
) -> None:
    assert set(got_chains) == {b.session for b in builders}
    for b in builders:
        got = got_chains[b.session]
        assert [v for v, _, _ in got] == list(range(1, len(got) + 1)), got  # each version once, none skipped
        assert got == clean[b.session]
        _, last_event, text = got[-1]
        assert last_event == f"{b.session}-e{2 * ROUNDS}"
        every = {m for e, ms in book.by_event.items() if e.startswith(f"{b.session}-") for m in ms}
        assert every <= set(find_markers(text)), sorted(every - set(find_markers(text)))


def kill(*pids: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_a_replay_killed_mid_run_and_resumed_builds_what_a_clean_run_builds(service_settings: Settings) -> None:
    with OpenAIServer(default=delayed(marker_echo, 0.25)) as llm:
        settings = scripted_pipeline_settings(service_settings, llm.base_url, partitions=2, event_threshold=3)
        book, builders = publish_sessions(settings)
        total = SESSIONS * 4

        crashed = replay(settings)
        run_id, worker_pids, topic = started_run(crashed)
        partial = wait_partial(settings, topic)
        # The crash: the run's worker first (killing only the command would leave it running), then the command.
        kill(*worker_pids, crashed.pid)
        crashed.wait(10)
        time.sleep(0.5)
        assert 5 <= len(partial) < total, f"the crash came too late to test anything: {len(partial)} summaries"
        print(f"killed after {len(partial)} of {total} summaries, {len(llm.requests)} model calls")

        replay_output(replay(settings, "--resume", run_id))
        resumed = chains(asyncio.run(read_topic(settings, topic, timeout=10)))
        clean = clean_chains(settings)

    assert_the_promise_holds(resumed, clean, book, builders)


def test_a_replay_on_two_workers_survives_one_of_them_killed(service_settings: Settings) -> None:
    """``--workers 2``: the partitions are shared; one worker SIGKILLed mid-run, the other takes its
    partitions over (rebalance, changelog recovery) and the run ends as a clean one-worker run."""
    # A slower model than above: the second worker's first assignment comes a few seconds in (tens of
    # seconds on a loaded machine: at 1 s per call one worker once published all 24 summaries first).
    with OpenAIServer(default=delayed(marker_echo, 2.0)) as llm:
        settings = scripted_pipeline_settings(service_settings, llm.base_url, partitions=2, event_threshold=3)
        book, builders = publish_sessions(settings)
        total = SESSIONS * 4

        run = start_replay(settings, "--workers", "2", "--llm-concurrency", "2")
        run_id, worker_pids, topic = started_run(run)
        assert len(worker_pids) == 2, worker_pids
        # The kill comes once both workers have published (the run is shared, not done by one while
        # the other idles) and some summaries are out.
        logs = [ROOT / ".distill" / "replay" / name for name in (f"{run_id}.log", f"{run_id}.w2.log")]
        deadline = time.monotonic() + 120
        published = [0, 0]
        while time.monotonic() < deadline:
            published = [p.read_text(errors="replace").count('"summary published"') for p in logs]
            if all(published) and sum(published) >= 5:
                break
            time.sleep(0.1)
        assert all(published), f"the run was not shared by its two workers: published per worker {published}"
        kill(worker_pids[1])
        partial = wait_partial(settings, topic)
        out = replay_output(run)
        assert f"worker pid {worker_pids[1]} exited" in out, out
        assert len(partial) < total, f"the kill came too late to test anything: {len(partial)} summaries"
        print(f"killed after {len(partial)} of {total} summaries; published per worker {published}")
        two = chains(asyncio.run(read_topic(settings, topic, timeout=10)))
        clean = clean_chains(settings, llm_concurrency=6)

    assert_the_promise_holds(two, clean, book, builders)
