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


def test_a_replay_killed_mid_run_and_resumed_builds_what_a_clean_run_builds(service_settings: Settings) -> None:
    with OpenAIServer(default=delayed(marker_echo, 0.25)) as llm:
        settings = scripted_pipeline_settings(service_settings, llm.base_url, partitions=2, event_threshold=3)
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

        crashed = replay(settings)
        assert crashed.stdout is not None
        first = crashed.stdout.readline()
        started = re.search(r"replay (\S+) started \(epoch (\d+)\): worker pid (\d+), output (\S+),", first)
        assert started is not None, first
        run_id, worker_pid, topic = started.group(1), int(started.group(3)), started.group(4)
        total = SESSIONS * 4

        def some(records: list[Any]) -> bool:
            return len(summaries_of(records)) >= 5

        partial = summaries_of(asyncio.run(read_topic(settings, topic, until=some, timeout=60)))
        # The crash: the run's worker first (killing only the command would leave it running), then the command.
        for pid in (worker_pid, crashed.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        crashed.wait(10)
        time.sleep(0.5)
        assert 5 <= len(partial) < total, f"the crash came too late to test anything: {len(partial)} summaries"
        print(f"killed after {len(partial)} of {total} summaries, {len(llm.requests)} model calls")

        replay_output(replay(settings, "--resume", run_id))
        resumed = chains(asyncio.run(read_topic(settings, topic, timeout=10)))
        clean_out = replay_output(replay(settings))
        clean_topic = re.search(r"→ (\S+)", clean_out.splitlines()[-1])
        assert clean_topic is not None, clean_out
        clean = chains(asyncio.run(read_topic(settings, clean_topic.group(1), timeout=10)))

    assert set(resumed) == {b.session for b in builders}
    for b in builders:
        got = resumed[b.session]
        assert [v for v, _, _ in got] == list(range(1, len(got) + 1)), got  # each version once, none skipped
        assert got == clean[b.session]
        _, last_event, text = got[-1]
        assert last_event == f"{b.session}-e{2 * ROUNDS}"
        every = {m for e, ms in book.by_event.items() if e.startswith(f"{b.session}-") for m in ms}
        assert every <= set(find_markers(text)), sorted(every - set(find_markers(text)))
