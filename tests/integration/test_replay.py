"""``distill replay`` on the real Kafka + Cassandra: summary epochs the read side serves and the live line continues.

A live worker summarizes a set of sessions (epoch 0) and the projector writes
them to Cassandra. The scripted model echoes every marker of its request and
tags its answer with the prompt it was given (``[NEW]`` for the changed one,
``[OLD]`` otherwise) and the tag of the previous summary it rolled forward
(``<NEW`` / ``<OLD``). Then:

* after a prompt change, the dry run counts every boundary as an LLM call; the
  replay makes exactly those calls, reaches the live boundaries, builds epoch
  N and switches the sessions to it (the read side serves it);
* a replay with nothing changed makes 0 LLM calls and builds epoch N+1 with the
  same boundaries and texts (the sessions switch to it);
* the live worker's next summary of a session rolls forward that epoch's head
  (its text is the previous summary the model is sent; every marker is kept);
* ``distill epochs adopt 0`` switches a session back to the live line;
  ``distill show --epochs`` serves the session still on the new epoch, and
  lists every epoch.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from projections.epoch_reads import EpochReader
from projections.read_api import SessionReader
from schemas import SessionKey
from schemas.settings import Settings
from streams.client import DistillClient
from tests.integration.pipeline_support import (
    DISTILL,
    SessionBuilder,
    live_pipeline,
    read_topic,
    scripted_pipeline_settings,
    summaries_of,
    worker_env,
)
from tests.support.keyspaces import KeyspacePool
from tests.support.markers import MarkerBook, find_markers
from tests.support.openai_server import OpenAIServer, Reply, answer, request_text

pytestmark = pytest.mark.integration

SESSIONS = 4
ROUNDS = 4  # 8 events per session, event threshold 3: two boundaries each
NEW_PROMPT = "请用要点总结这段对话：{conversation_text}"
_TAG = re.compile(r"\[(NEW|OLD)\]")


def tagged_echo(body: dict[str, Any]) -> Reply:
    """Every marker of the request, tagged with the prompt and the previous summary's tag."""
    text = request_text(body)
    previous = _TAG.search(text)
    tag = "NEW" if "要点" in text else "OLD"
    return answer(f"[{tag}]{'<' + previous.group(1) if previous else ''} " + " ".join(find_markers(text)))


@pytest.fixture(scope="module")
def llm_server() -> Iterator[OpenAIServer]:
    with OpenAIServer(default=tagged_echo) as server:
        yield server


@pytest.fixture(scope="module")
def pipeline(
    service_settings: Settings,
    keyspaces: KeyspacePool,
    llm_server: OpenAIServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Settings, Any]]:
    settings = scripted_pipeline_settings(service_settings, llm_server.base_url, partitions=2, event_threshold=3)
    keyspace = keyspaces.lease()
    try:
        with live_pipeline(settings, keyspace, tmp_path_factory.mktemp("replay")) as cql:
            yield settings, cql
    finally:
        keyspaces.release(keyspace)


def chains(summaries: list[dict[str, Any]]) -> dict[tuple[str, str], list[tuple[str | None, str]]]:
    """Per (session, key), the boundaries and texts in version order."""
    out: dict[tuple[str, str], list[tuple[str | None, str]]] = {}
    for s in sorted(summaries, key=lambda s: (s["session_id"], s["filter_key"], s["version"])):
        out.setdefault((s["session_id"], s["filter_key"]), []).append((s["boundary"]["last_event_id"], s["summary"]))
    return out


def distill(settings: Settings, *args: str, timeout: float = 120) -> str:
    done = subprocess.run([DISTILL, *args], env=worker_env(settings), capture_output=True, text=True,
                          timeout=timeout, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def run_replay(settings: Settings, *args: str) -> str:
    return distill(settings, "replay", "--idle-exit", "2", *args)


def output_topic(out: str) -> str:
    found = re.search(r"→ (\S+)", out.splitlines()[-1])
    assert found is not None, out
    return found.group(1)


def with_prompt(settings: Settings, prompt: str) -> Settings:
    data = settings.model_dump()
    data["summary"]["prompt"] = prompt
    data["llm"]["api_key"] = settings.llm.api_key
    # An operator's quiet log level: the replay still counts its LLM calls and cache hits (its run's
    # log is read for them; at WARNING it said "LLM calls 0, reused from cache 0" for any run).
    data["worker"]["log_level"] = "WARNING"
    return Settings(**data)


async def served(
    reader: SessionReader, key: SessionKey, epoch: int, timeout: float = 30.0, version: int = 0
) -> tuple[int, str]:
    """The served ``(version, text)`` of the session's full-session key once it is of ``epoch``
    (and at least ``version``: the projector writes what the worker published a moment later)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        found = await reader.latest_summary(key)
        if found is not None and found.epoch == epoch and found.version >= version:
            return found.version, found.summary
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"{'/'.join(key)} is not served from epoch {epoch}: {found}")
        await asyncio.sleep(0.3)


async def test_a_replay_builds_an_epoch_the_read_side_serves_and_the_live_line_rolls_it_forward(
    pipeline: tuple[Settings, Any], llm_server: OpenAIServer
) -> None:
    settings, cql = pipeline
    reader = SessionReader(cql, settings.cassandra.keyspace)
    book = MarkerBook()
    builders = [SessionBuilder(app="rp") for _ in range(SESSIONS)]
    keys = [SessionKey(b.app_name, b.user_id, b.session) for b in builders]

    def round_of(b: SessionBuilder, r: int) -> list[Any]:
        question = f"第{r}个问题{book.mint(f'{b.session}-e{b.n + 1}')}：缓存怎么失效？"
        user = b.user(question)
        return [user, b.assistant(f"第{r}个回答{book.mint(f'{b.session}-e{b.n + 1}')}。")]

    async with DistillClient(settings) as client:
        for r in range(ROUNDS):
            await client.publish_many([e for b in builders for e in round_of(b, r)])
    ids = {b.session for b in builders}

    def enough(records: list[Any]) -> bool:
        return len([s for s in summaries_of(records) if s["session_id"] in ids]) >= 2 * SESSIONS

    records = await read_topic(settings, settings.topics.summaries, until=enough, timeout=60)
    live = chains([s for s in summaries_of(records) if s["session_id"] in ids])
    boundaries = sum(len(c) for c in live.values())
    assert len(live) == SESSIONS and boundaries == 2 * SESSIONS
    assert all(text.startswith("[OLD]") for c in live.values() for _, text in c)
    for k in keys:
        await served(reader, k, 0)
    selection = [a for b in builders for a in ("--session", b.session)]

    # A prompt change: every boundary is redone, the sessions switch to the new epoch.
    changed = with_prompt(settings, NEW_PROMPT)
    dry = await asyncio.to_thread(run_replay, changed, "--dry-run", *selection)
    assert f"{SESSIONS} keys, {boundaries} boundaries" in dry and f"0 cache hits, {boundaries} LLM calls" in dry, dry
    calls = len(llm_server.requests)
    out = await asyncio.to_thread(run_replay, changed, *selection)
    assert f"LLM calls {boundaries}" in out and f"{SESSIONS} sessions switched" in out, out
    assert len(llm_server.requests) == calls + boundaries
    first = chains(summaries_of(await read_topic(settings, output_topic(out), timeout=10)))
    assert {k: [b for b, _ in c] for k, c in first.items()} == {k: [b for b, _ in c] for k, c in live.items()}
    assert all(text.startswith("[NEW]") for c in first.values() for _, text in c)
    epoch = int(re.search(r"epoch (\d+)\)", out).group(1))  # type: ignore[union-attr]
    for k in keys:
        assert await served(reader, k, epoch) == (2, first[(k.session_id, "")][-1][1])

    # Nothing changed: no model call, the same boundaries and texts, in the next epoch.
    calls = len(llm_server.requests)
    out = await asyncio.to_thread(run_replay, changed, *selection)
    assert f"LLM calls 0, reused from cache {boundaries}" in out and f"{SESSIONS} sessions switched" in out, out
    assert len(llm_server.requests) == calls
    again = chains(summaries_of(await read_topic(settings, output_topic(out), timeout=10)))
    assert again == first
    epoch += 1
    for k in keys:
        await served(reader, k, epoch)

    # The live worker (still on the old prompt) rolls the served epoch's head forward.
    head = first[(keys[0].session_id, "")][-1][1]
    calls = len(llm_server.requests)
    async with DistillClient(settings) as client:
        await client.publish_many([e for r in range(ROUNDS, ROUNDS + 2) for e in round_of(builders[0], r)])

    def next_summary(records: list[Any]) -> bool:
        return any(s["session_id"] == keys[0].session_id and s["version"] == 3 for s in summaries_of(records))

    records = await read_topic(settings, settings.topics.summaries, until=next_summary, timeout=60)
    [nxt] = [s for s in summaries_of(records) if s["session_id"] == keys[0].session_id and s["version"] == 3]
    assert nxt["epoch"] == epoch and nxt["summary"].startswith("[OLD]<NEW "), nxt["summary"]
    fresh = book.markers_of(f"{keys[0].session_id}-e{2 * ROUNDS + 1}")[0]
    [request] = [r for r in llm_server.requests[calls:] if fresh in r.text()]
    assert head in request.text()  # the served epoch's head is the previous summary rolled forward
    covered = [e for e in book.by_event if e.startswith(f"{keys[0].session_id}-")
               and int(e.rsplit("-e", 1)[1]) <= int(nxt["boundary"]["last_event_id"].rsplit("-e", 1)[1])]  # fmt: skip
    missing = [m for e in covered for m in book.markers_of(e) if m not in nxt["summary"]]
    assert not missing, (missing, nxt["summary"])
    assert await served(reader, keys[0], epoch, version=3) == (3, nxt["summary"])

    # Back to the live line for one session; every epoch stays listed.
    out = await asyncio.to_thread(distill, settings, "epochs", "adopt", "0", "--session", "/".join(keys[1]))
    assert "epoch 0: 1 sessions switched" in out, out
    assert await served(reader, keys[1], 0) == (2, live[(keys[1].session_id, "")][-1][1])
    assert (await EpochReader(cql, settings.cassandra.keyspace, reader).served_epoch(keys[0])) == epoch
    epochs = EpochReader(cql, settings.cassandra.keyspace, reader)
    for _ in range(60):  # the replays' outputs are projected once the projector has found their topics
        if [v.versions for v in await epochs.epochs(keys[0])] == [2, 2, 3]:
            break
        await asyncio.sleep(0.5)
    shown = json.loads(await asyncio.to_thread(distill, settings, "show", *keys[0], "--epochs", "--json"))
    assert (shown["served_epoch"], shown["summary"]["epoch"], shown["summary"]["version"]) == (epoch, epoch, 3)
    assert shown["summary"]["text"] == nxt["summary"]
    assert [(e["epoch"], e["served"], e["versions"]) for e in shown["epochs"]] == [
        (0, False, 2), (epoch - 1, False, 2), (epoch, True, 3)]  # fmt: skip
    assert [h["text"] for h in shown["epochs"][epoch - 1]["heads"]] == [first[(keys[0].session_id, "")][-1][1]]
