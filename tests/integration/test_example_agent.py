"""``examples/agent_loop.py`` on the real pipeline: every request the facade builds from Cassandra loses nothing.

One keyspace, one topic set, one worker and one projector (``distill`` subprocesses)
for the module; two scripted OpenAI-compatible HTTP servers
(``tests/support/openai_server.py``) reached through the real ``openai`` client:

- the summarizer's model, :class:`~tests.support.openai_server.MarkerEcho`: a summary
  carries every marker its request held (and every payload cut it saw);
- the agent's model: the example's own rule book (``offline_chat_endpoint.respond``:
  ``get_weather`` calls for weather questions, ``session_search`` for "earlier"
  questions), each reply carrying one new marker of its own and none it read.

Every user turn and every tool result carries markers (tool results at the head and
deep in the middle, glued to CJK text). The oracle, at every request the agent model
received: every marker of every event published before it is in the request — in the
injected summary or in a message — or the request names the event as cut (a compaction
placeholder or a head+tail cut: ``session_load`` reads it back).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import re
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from openai import AsyncOpenAI

from projections.cassandra_session import connect
from schemas import SessionEvent
from schemas.settings import Settings
from streams.adapters.backend import SessionBackend
from streams.agent import AgentRequest, DistillAgent, ProjectionBehindError
from streams.services.local_pipeline import LocalPipeline
from tests.integration import test_recall_oracle as oracle
from tests.integration.pipeline_support import create_topics, scripted_pipeline_settings, worker_env
from tests.support.keyspaces import KeyspacePool
from tests.support.markers import MARKER_RE, find_cut_event_ids, find_markers
from tests.support.openai_server import EchoStyle, FaultMix, MarkerEcho, OpenAIServer, Reply, request_text

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

import agent_loop
from offline_chat_endpoint import respond

pytestmark = pytest.mark.integration
SMALL_APP = "agent_small"
APPS = {agent_loop.APP_NAME: {"event_threshold": 4}, SMALL_APP: {"event_threshold": 1000}}
"""The example's app summarizes by itself; the small-window app only when the facade forces it."""
BUDGET_DETAIL = "1200 EUR"
TERSE = EchoStyle("", "Summary: ", " ", "")
"""Markers only: a summary small enough for the small window (the prose style outgrows it within a few turns)."""
COMPACTION_CUT_RE = re.compile(r"event_id(?::\s*|=)([A-Za-z0-9_.:-]+)")
"""How a compaction placeholder (``event_id: e``) or a head+tail cut (``event_id=e;``) names its event."""


def mark(label: str) -> str:
    return "MK" + hashlib.blake2b(label.encode(), digest_size=5).hexdigest()


class MarkerAgentModel:
    """The agent's model: the example's rule book; each reply with text gets a new marker, old ones removed."""

    def __init__(self) -> None:
        self.replies = 0
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Reply:
        message = respond(body.get("messages", []), body.get("tools") or [])
        with self._lock:
            self.replies += 1
            n = self.replies
        if message.get("content"):
            message["content"] = MARKER_RE.sub("", message["content"]) + f" （回答 {mark(f'reply-{n}')}）"
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        completion = {
            "id": f"chatcmpl-{n}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", "agent"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }  # fmt: skip
        return Reply(body=completion)


def weather_with_markers(padding: int = 0) -> Any:
    """The example's ``get_weather``, its result marked at the head and (after ``padding`` characters) in the middle."""
    calls = 0

    def get_weather(city: str) -> str:
        nonlocal calls
        calls += 1
        data = json.loads(agent_loop.get_weather(city))
        middle = {"note": "x" * padding + f"中间的细节{mark(f'{city}-{calls}-middle')}天气"}
        data["daily"].insert(len(data["daily"]) // 2, middle)
        return json.dumps({"ref": mark(f"{city}-{calls}-head"), **data}, ensure_ascii=False)

    return get_weather


@dataclass
class Spy:
    """Every event the facade published, with how many agent-model requests preceded it."""

    model: OpenAIServer
    published: list[tuple[int, SessionEvent]] = field(default_factory=list)

    def attach(self, backend: SessionBackend) -> None:
        publish = backend.client.publish_logged  # what publish_many and the facade both send through

        async def spy(records: Any, **kwargs: Any) -> list[int]:
            records = list(records)
            self.published.extend((len(self.model.requests), r) for r in records if isinstance(r, SessionEvent))
            return await publish(records, **kwargs)

        backend.client.publish_logged = spy  # type: ignore[method-assign]


def event_text(event: SessionEvent) -> str:
    msg = event.message
    return " ".join([msg.content or "", *(f"{c.function.name} {c.function.arguments}" for c in msg.tool_calls)])


def _own_markers(events: Sequence[SessionEvent]) -> dict[str, list[str]]:
    """Each event's markers: those it is the first to carry (a recall answer quoting one does not own it)."""
    owner: dict[str, str] = {}
    own: dict[str, list[str]] = {}
    for event in events:
        own[event.event_id] = [m for m in find_markers(event_text(event)) if owner.setdefault(m, event.event_id)
                               == event.event_id]  # fmt: skip
    return own


def missing_in(body: dict[str, Any], events: Sequence[SessionEvent], own: dict[str, list[str]]) -> list[str]:
    """The markers of ``events`` neither in the request ``body`` nor accounted for by a cut naming their event."""
    text = request_text(body)
    cut = find_cut_event_ids(text) | set(COMPACTION_CUT_RE.findall(text))
    return [f"{marker} of {e.event_id} ({e.message.role})" for e in events for marker in own[e.event_id]
            if marker not in text and e.event_id not in cut]  # fmt: skip


def violations(spy: Spy, session_id: str, first_request: int) -> tuple[list[str], int]:
    """The oracle over every agent-model request from ``first_request`` on; also how many markers it judged."""
    events = [(n, e) for n, e in spy.published if e.session_id == session_id]
    own = _own_markers([e for _, e in events])
    problems: list[str] = []
    judged = 0
    for index in range(first_request, len(spy.model.requests)):
        before = [e for n, e in events if n <= index]
        judged += sum(len(own[e.event_id]) for e in before)
        problems += [f"request {index}: {m} missing" for m in missing_in(spy.model.requests[index].body, before, own)]
    return problems, judged


@pytest.fixture(scope="module")
def summary_model() -> Iterator[OpenAIServer]:
    no_faults = FaultMix(server_error=0, rate_limited=0, empty=0, slow=0)
    with OpenAIServer(default=MarkerEcho(no_faults, styles=(TERSE,))) as server:
        yield server


@pytest.fixture(scope="module")
def agent_model() -> Iterator[OpenAIServer]:
    with OpenAIServer(default=MarkerAgentModel()) as server:
        yield server


@pytest.fixture(scope="module")
def pipeline(
    service_settings: Settings,
    keyspaces: KeyspacePool,
    summary_model: OpenAIServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Settings]:
    settings = scripted_pipeline_settings(service_settings, summary_model.base_url, partitions=2, apps=APPS,
                                          topic_prefix="agent")  # fmt: skip
    settings.cassandra.keyspace = keyspaces.lease()
    asyncio.run(create_topics(settings))
    cluster, cql = connect(settings.cassandra)
    try:
        with LocalPipeline(tmp_path_factory.mktemp("agent"), env=worker_env(settings)) as procs:
            procs.wait_for_worker(120)
            _wait_for_projector(cql, settings, timeout=60)
            yield settings
            for name, proc in procs.procs.items():
                assert proc.poll() is None, f"the {name} died: see {procs.log(name)}"
    finally:
        cluster.shutdown()
        keyspaces.release(settings.cassandra.keyspace)


def _wait_for_projector(cql: Any, settings: Settings, timeout: float) -> None:
    """Until the projector's heartbeat rows exist for the events topic (it has its partitions)."""
    query = f"SELECT partition FROM {settings.cassandra.keyspace}.projector_progress WHERE topic = %s ALLOW FILTERING"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if list(cql.execute(query, (settings.topics.events,))):
            return
        time.sleep(0.2)
    raise AssertionError("the projector wrote no heartbeat")


@pytest.fixture()
async def backend(pipeline: Settings) -> AsyncIterator[SessionBackend]:
    async with SessionBackend(pipeline) as b:
        yield b


def _agent(backend: SessionBackend, app: str, **options: Any) -> DistillAgent:
    return DistillAgent(backend, app_name=app, user_id="u1", session_id=f"s-{uuid.uuid4().hex[:8]}",
                        model="scripted-agent", **options)  # fmt: skip


def _llm(server: OpenAIServer) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0)


def _assert_nothing_dropped(requests: Sequence[AgentRequest]) -> None:
    dropped = [(i, r.dropped_messages, r.report.over_budget) for i, r in enumerate(requests)
               if r.dropped_messages or r.report.over_budget]  # fmt: skip
    assert not dropped, f"requests that dropped history or stayed over the budget: {dropped}"


async def test_the_example_loop_keeps_every_marker_and_recalls_a_hidden_detail(
    backend: SessionBackend, agent_model: OpenAIServer
) -> None:
    spy = Spy(agent_model)
    spy.attach(backend)
    agent = _agent(backend, agent_loop.APP_NAME, **agent_loop.AGENT_OPTIONS)
    recall_turn = len(agent_loop.TURNS) - 1
    # The recall question goes into the search query verbatim: a marker there would be a term no other event has.
    turns = [f"{text} （备注：{mark(f'turn-{i}')}）" if i != recall_turn else text
             for i, text in enumerate(agent_loop.TURNS)]  # fmt: skip

    async def before_turn(turn: int) -> None:
        if turn != recall_turn:
            return
        # The recall question is about turn 2: wait until a summary's boundary has passed it (no sleeps).
        started = time.monotonic()
        while time.monotonic() - started < 30:
            read = await agent.read()
            shown = " ".join(e.message.content or "" for e in read.events)
            if read.summary is not None and BUDGET_DETAIL not in shown:
                return
            await asyncio.sleep(0.1)
        raise AssertionError("no summary covered the budget turn within 30 s")

    first = len(agent_model.requests)
    requests = await agent_loop.conversation(agent, _llm(agent_model), "scripted-agent", turns,
                                             {"get_weather": weather_with_markers()}, before_turn)  # fmt: skip

    problems, judged = violations(spy, agent.key.session_id, first)
    assert not problems, "\n".join(problems[:20])
    assert judged > 100, judged  # several turns of markers, judged at every request
    _assert_nothing_dropped(requests)
    assert any(r.summary is not None for r in requests), "no request carried a summary"
    assert any(r.report.compaction.placeholders for r in requests), "no older tool result was compacted"

    bodies = [r.body for r in agent_model.requests[first:]]
    asked = next(i for i, b in enumerate(bodies) if b["messages"][-1].get("content") == turns[recall_turn])
    assert BUDGET_DETAIL not in request_text(bodies[asked]), "the detail was not hidden behind the boundary"
    calls = bodies[asked + 1]["messages"][-2]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["session_search"]
    found = bodies[asked + 1]["messages"][-1]["content"]
    assert BUDGET_DETAIL in found and json.loads(found)["historical_context"] is True

    # A new facade on the session (a restarted runtime) continues it from Cassandra alone, once the
    # projector shows what the first one published (which only the first one can wait for).
    await agent.read()
    fresh = DistillAgent(backend, app_name=agent.key.app_name, user_id="u1", session_id=agent.key.session_id,
                         model="scripted-agent", **agent_loop.AGENT_OPTIONS)  # fmt: skip
    again = await fresh.next_request(agent_loop.SYSTEM_PROMPT, tools=[agent_loop.WEATHER_TOOL])
    published = [e for _, e in spy.published]
    assert not missing_in({"messages": again.messages}, published, _own_markers(published))
    last_reply = next(e for e in reversed(published) if e.message.role == "assistant")
    resumed = await fresh.record({"role": "assistant", "content": "继续 (resumed)"})
    assert resumed.request_id == last_reply.request_id and resumed.timestamp > last_reply.timestamp


async def test_a_small_window_cuts_payloads_and_forces_summaries_instead_of_dropping_rounds(
    backend: SessionBackend, agent_model: OpenAIServer
) -> None:
    """Large tool results, a 3000-token window, compaction off, a worker that never summarizes by itself."""
    spy = Spy(agent_model)
    spy.attach(backend)
    agent = _agent(backend, SMALL_APP, context_window=3000)
    cities = ("Lisbon", "Porto", "Madrid", "Seville", "Berlin", "Lisbon", "Porto")
    turns = [f"What's the weather in {city}? 请查一下天气 {mark(f'small-{i}')}" for i, city in enumerate(cities)]

    first = len(agent_model.requests)
    requests = await agent_loop.conversation(agent, _llm(agent_model), "scripted-agent", turns,
                                             {"get_weather": weather_with_markers(padding=6000)})  # fmt: skip

    problems, judged = violations(spy, agent.key.session_id, first)
    assert not problems, "\n".join(problems[:20])
    assert judged > 30, judged
    _assert_nothing_dropped(requests)
    budget = requests[0].budget
    assert budget is not None and all(r.report.prompt_tokens <= budget for r in requests)
    assert any(r.cut_tokens for r in requests), "no payload was cut to fit"
    assert any(r.summary_refreshed for r in requests), "the facade never forced a summary"


async def test_next_request_says_when_cassandra_does_not_show_the_published_events(pipeline: Settings) -> None:
    """Events on a topic no projector reads: no request is built on a view that misses them."""
    data = pipeline.model_dump()
    data["topics"]["events"] = f"{pipeline.topics.events}-unprojected"
    settings = Settings(**data)
    await create_topics(settings)
    async with SessionBackend(settings) as backend:
        agent = _agent(backend, agent_loop.APP_NAME, projection_wait_s=0.5)
        said = await agent.user("你好，去里斯本的火车几点？")
        started = time.monotonic()
        with pytest.raises(ProjectionBehindError, match="is the projector running") as info:
            await agent.next_request(agent_loop.SYSTEM_PROMPT)
        assert 0.5 <= time.monotonic() - started < 5
        assert info.value.missing == (said.event_id,)


async def test_a_facade_request_s_cuts_and_notes_load_back_exactly_through_its_recall_tools(
    backend: SessionBackend, agent_model: OpenAIServer
) -> None:
    """The recall oracle (``test_recall_oracle``) through the facade and the live worker: a session recorded by
    the facade, large CJK tool results, call ids restarting ``call_0`` each turn, a summary the worker made;
    every cut and note of the next request, and every summary-input cut the summary shows, followed through the
    agent's own recall tools (``run_tools``'s executor), gives back exactly what the request stands for."""
    spy = Spy(agent_model)
    spy.attach(backend)
    agent = _agent(backend, SMALL_APP, context_window=6000, enable_context_compaction=True,
                   context_compaction_tool_result_max_tokens=300)  # fmt: skip
    rng = random.Random(17)

    def fetch(q: str) -> str:
        return oracle._text(rng, rng.choice((3000, 30_000)))

    async def rounds(first: int, n: int) -> None:
        for turn in range(first, first + n):
            await agent.user(f"第{turn}轮：查一下仓库 {oracle._text(rng, 300)}")
            reply = {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"call_{i}", "type": "function",
                 "function": {"name": ("fetch", "読む")[i], "arguments": json.dumps({"q": oracle._text(rng, 1500)},
                                                                                   ensure_ascii=False)}}
                for i in range(2)]}  # fmt: skip
            await agent.record(reply)
            await agent.run_tools(reply, {"fetch": fetch, "読む": fetch})
            await agent.record({"role": "assistant", "content": oracle._text(rng, 800)})

    await rounds(0, 3)
    assert await agent.summarize(force=True) is not None
    await rounds(3, 2)
    await agent.user("继续 — what next? 다음은?")
    request = await agent.next_request("You are helpful.")
    assert request.summary is not None
    published = [e for _, e in spy.published if e.session_id == agent.key.session_id]
    order = [e.event_id for e in published]
    session = oracle.Session(agent.key, [], {e.event_id: e for e in published}, order)
    executor = agent.recall
    assert executor is not None
    follower = oracle.Follower(session, executor)
    boundary = request.summary.boundary.last_event_id
    covered = frozenset(order[: order.index(boundary) + 1]) if boundary else frozenset()
    await follower.check(request.messages, "", covered)
    cuts, _ = oracle.cuts_in(request.messages)
    assert cuts and any(c.named_call for c in cuts), "the request cut nothing: the oracle judged nothing"
    # The summary's own cuts of its input: the scripted summarizer echoes the load each cut names.
    named = re.findall(r'session_load\(event_id="([^"]+)"\)', request.summary.summary)
    assert named, request.summary.summary
    for event_id in named:
        assert await follower.load(event_id) == oracle.shown(session.events[event_id]), event_id
