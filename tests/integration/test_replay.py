"""``distill replay`` on the real Kafka: the same boundaries as the live run, the cache, the dry run.

A live worker summarizes a set of sessions (the OpenAI-compatible test server
answers); then

* a dry run with nothing changed counts every live boundary as a cache hit;
* a replay with nothing changed makes 0 LLM calls and writes the live run's
  boundaries and texts;
* after a prompt change, the dry run counts every boundary as an LLM call, and
  the replay makes exactly those calls and reaches the same boundaries.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from schemas.settings import Settings
from streams.client import DistillClient
from tests.integration.pipeline_support import (
    DISTILL,
    SessionBuilder,
    create_topics,
    read_topic,
    scripted_pipeline_settings,
    summaries_of,
    worker_env,
    workers,
)
from tests.support.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

SESSIONS = 4
ROUNDS = 4  # 8 events per session, event threshold 3: two boundaries each


@pytest.fixture(scope="module")
def llm_server() -> Iterator[OpenAIServer]:
    with OpenAIServer() as server:
        yield server


@pytest.fixture(scope="module")
def pipeline(
    service_settings: Settings, llm_server: OpenAIServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Settings]:
    settings = scripted_pipeline_settings(service_settings, llm_server.base_url, partitions=2, event_threshold=3)
    asyncio.run(create_topics(settings))
    with workers(settings, tmp_path_factory.mktemp("replay")) as procs:
        yield settings
        for p in procs:
            assert p.proc.poll() is None, p.log_text()[-4000:]


def chains(summaries: list[dict[str, Any]]) -> dict[tuple[str, str], list[tuple[str | None, str]]]:
    """Per (session, key), the boundaries and texts in version order."""
    out: dict[tuple[str, str], list[tuple[str | None, str]]] = {}
    for s in sorted(summaries, key=lambda s: (s["session_id"], s["filter_key"], s["version"])):
        out.setdefault((s["session_id"], s["filter_key"]), []).append((s["boundary"]["last_event_id"], s["summary"]))
    return out


def run_replay(settings: Settings, *args: str) -> str:
    done = subprocess.run([DISTILL, "replay", "--idle-exit", "2", *args], env=worker_env(settings),
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def with_prompt(settings: Settings, prompt: str) -> Settings:
    data = settings.model_dump()
    data["summary"]["prompt"] = prompt
    data["llm"]["api_key"] = settings.llm.api_key
    return Settings(**data)


async def test_replay_reaches_the_live_boundaries_from_the_cache_and_redoes_them_after_a_prompt_change(
    pipeline: Settings, llm_server: OpenAIServer
) -> None:
    builders = [SessionBuilder(app="rp") for _ in range(SESSIONS)]
    async with DistillClient(pipeline) as client:
        for r in range(ROUNDS):
            await client.publish_many(
                [e for b in builders for e in (b.user(f"第{r}个问题：缓存怎么失效？"), b.assistant(f"第{r}个回答。"))]
            )
    ids = {b.session for b in builders}

    def enough(records: list[Any]) -> bool:
        return len([s for s in summaries_of(records) if s["session_id"] in ids]) >= 2 * SESSIONS

    records = await read_topic(pipeline, pipeline.topics.summaries, until=enough, timeout=60)
    live = chains([s for s in summaries_of(records) if s["session_id"] in ids])
    boundaries = sum(len(c) for c in live.values())
    assert len(live) == SESSIONS and boundaries == 2 * SESSIONS
    selection = [a for b in builders for a in ("--session", b.session)]

    dry = await asyncio.to_thread(run_replay, pipeline, "--dry-run", *selection)
    assert f"{SESSIONS} keys, {boundaries} boundaries" in dry and f"{boundaries} cache hits, 0 LLM calls" in dry, dry

    calls = len(llm_server.requests)
    out = await asyncio.to_thread(run_replay, pipeline, *selection)
    assert "LLM calls 0" in out, out
    topic = re.search(r"→ (\S+)", out.splitlines()[-1])
    assert topic is not None, out
    replayed = chains(summaries_of(await read_topic(pipeline, topic.group(1), timeout=10)))
    assert replayed == live  # the same boundaries and texts, from the cache
    assert len(llm_server.requests) == calls

    changed = with_prompt(pipeline, "请用要点总结这段对话：{conversation_text}")
    dry = await asyncio.to_thread(run_replay, changed, "--dry-run", *selection)
    assert f"0 cache hits, {boundaries} LLM calls" in dry, dry
    out = await asyncio.to_thread(run_replay, changed, *selection)
    assert f"LLM calls {boundaries}" in out, out
    topic = re.search(r"→ (\S+)", out.splitlines()[-1])
    assert topic is not None, out
    redone = chains(summaries_of(await read_topic(pipeline, topic.group(1), timeout=10)))
    assert {k: [b for b, _ in c] for k, c in redone.items()} == {k: [b for b, _ in c] for k, c in live.items()}
    assert len(llm_server.requests) == calls + boundaries
