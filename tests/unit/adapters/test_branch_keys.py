"""The adapters publish each event under the filter key its framework gives it.

trpc-agent-py names a sub-agent's events by their ``branch`` (``root.research``)
or an explicit ``filter_key``; the OpenAI Agents SDK's items name no agent, so a
sub-agent's branch is the filter key of its own session. Both were published
with ``""``: a branch's summary took its siblings' events and missed nothing
of its own only by accident. Driven through the frameworks' real runners.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from typing import Any

import pytest

from schemas import SessionEvent, SessionKey, Summarize
from schemas.settings import Settings
from streams.adapters.backend import SessionView
from streams.app.cache import SummaryCache
from streams.app.inprocess import InProcessReplay, records_of
from streams.context.recall_tools import RecallCapabilities
from streams.rules.policy import policies_from_settings
from streams.summarizer import build_summarizer
from tests.unit.summarizer.helpers import EchoModel, markers

pytest.importorskip("trpc_agent_sdk.events", exc_type=ImportError)
pytest.importorskip("agents", exc_type=ImportError)
from agents import Agent, RunConfig, Runner, Usage
from agents.items import ModelResponse
from agents.models.interface import Model
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)
from trpc_agent_sdk.agents import BaseAgent, ParallelAgent
from trpc_agent_sdk.context import InvocationContext
from trpc_agent_sdk.events import Event
from trpc_agent_sdk.runners import Runner as TrpcRunner
from trpc_agent_sdk.types import Content, Part

from streams.adapters.openai_agents_session import DistillSession
from streams.adapters.trpc_events import filter_key_of
from streams.adapters.trpc_session import DistillSessionService

KEY = SessionKey("app", "u", "s")


class RecordingBackend:
    """The adapters' backend, in memory: what was published, and a view of all of it."""

    settings = Settings()
    recall_capabilities = RecallCapabilities()

    def __init__(self) -> None:
        self.published: list[SessionEvent] = []

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def publish(self, events: Sequence[SessionEvent]) -> None:
        self.published.extend(events)

    async def view(self, key: SessionKey, filter_key: str = "") -> SessionView:
        events = tuple(e for e in self.published if e.session_key == key)
        return SessionView(key, filter_key, None, events, len(events))


# -- trpc-agent-py -------------------------------------------------------------------------------------------


class Says(BaseAgent):  # type: ignore[misc]  # the SDK is untyped
    """A sub-agent answering one fixed text, stamped with the branch trpc gave it."""

    text: str

    async def _run_async_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        yield Event(invocation_id=ctx.invocation_id, author=self.name, branch=ctx.branch,
                    content=Content(role="model", parts=[Part.from_text(text=self.text)]))  # fmt: skip


async def run_trpc(backend: RecordingBackend, service_key: str = "") -> None:
    service = DistillSessionService(backend=backend, filter_key=service_key)  # type: ignore[arg-type]
    team = ParallelAgent(name="planner", sub_agents=[
        Says(name="research", text="研究结果 R1 R2"), Says(name="itinerary", text="行程 I1 I2")])  # fmt: skip
    runner = TrpcRunner(app_name=KEY.app_name, agent=team, session_service=service)
    await service.create_session(app_name=KEY.app_name, user_id=KEY.user_id, session_id=KEY.session_id)
    for text in ("plan a trip M1", "and a hotel M2"):
        message = Content(role="user", parts=[Part.from_text(text=text)])
        async for _ in runner.run_async(user_id=KEY.user_id, session_id=KEY.session_id, new_message=message):
            pass


def keys_by_author(events: Sequence[SessionEvent]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for e in events:
        out.setdefault(e.author, set()).add(e.filter_key)
    return out


async def test_trpc_sub_agents_publish_under_their_branch_keys() -> None:
    backend = RecordingBackend()
    await run_trpc(backend)
    assert keys_by_author(backend.published) == {"user": {""}, "research": {"app/research"},
                                                 "itinerary": {"app/itinerary"}}  # fmt: skip


async def test_a_trpc_service_scoped_to_a_branch_publishes_its_sub_agents_below_it() -> None:
    backend = RecordingBackend()
    await run_trpc(backend, service_key="app/trip")
    assert keys_by_author(backend.published) == {"user": {"app/trip"}, "research": {"app/trip/research"},
                                                 "itinerary": {"app/trip/itinerary"}}  # fmt: skip


@pytest.mark.parametrize(
    ("fields", "base", "key"),
    [
        ({}, "", ""),
        ({"branch": "root"}, "", ""),
        ({"branch": "root"}, "app/x", "app/x"),
        ({"branch": "root.research.web"}, "", "app/research/web"),
        ({"branch": "root.root.research.research"}, "", "app/research"),  # trpc's parallel branch
        ({"branch": "root.research"}, "app/x", "app/x/research"),
        ({"branch": "root.research", "filter_key": "app/graph/node"}, "app/x", "app/graph/node"),
    ],
)
def test_the_filter_key_of_a_trpc_event(fields: dict[str, Any], base: str, key: str) -> None:
    assert filter_key_of(Event(author="a", **fields), "app", base) == key


# -- OpenAI Agents SDK ---------------------------------------------------------------------------------------


class ScriptedModel(Model):  # type: ignore[misc]  # the SDK is untyped
    """Calls each tool of ``calls`` in turn, then answers ``text``."""

    def __init__(self, text: str, calls: Sequence[tuple[str, str]] = ()) -> None:
        self.text = text
        self.calls = list(calls)

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        if self.calls:
            name, arguments = self.calls.pop(0)
            item: Any = ResponseFunctionToolCall(type="function_call", call_id=f"call-{name}", name=name,
                                                 arguments=arguments, id=f"fc-{name}")  # fmt: skip
        else:
            item = ResponseOutputMessage(id="msg", type="message", role="assistant", status="completed",
                                         content=[ResponseOutputText(type="output_text", text=self.text,
                                                                     annotations=[])])  # fmt: skip
        return ModelResponse(output=[item], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


async def test_an_agents_sub_agent_with_a_branch_session_publishes_under_its_key() -> None:
    backend = RecordingBackend()

    def session(agent: str, filter_key: str = "") -> DistillSession:
        return DistillSession(KEY.session_id, backend, app_name=KEY.app_name, user_id=KEY.user_id,  # type: ignore[arg-type]
                              agent_name=agent, filter_key=filter_key)  # fmt: skip

    research = Agent(name="research", instructions="find", model=ScriptedModel("found R2"))
    tool = research.as_tool("research", "research a question", session=session("research", "app/research"))
    root = Agent(name="root", instructions="plan", model=ScriptedModel("done M3", [("research", '{"input": "R1"}')]),
                 tools=[tool])  # fmt: skip
    result = await Runner.run(root, "plan M1", session=session("root"), run_config=RunConfig(tracing_disabled=True))
    assert result.final_output == "done M3"
    published = [(e.filter_key, e.author, e.message.content) for e in backend.published]
    assert ("app/research", "research", "found R2") in published
    assert ("app/research", "user", "R1") in published
    assert {k for k, author, text in published if author == "root" or text == "plan M1"} == {""}


# -- the oracle: a branch's markers end up in its summary, a sibling's do not --------------------------------


async def test_a_trpc_branch_summary_holds_its_own_events_and_not_its_siblings() -> None:
    backend = RecordingBackend()
    await run_trpc(backend)
    settings = Settings.model_validate({"summary": {"event_threshold": 1000}})
    model = EchoModel(context_window=128_000)
    summarizer = build_summarizer(settings, model=model)  # type: ignore[arg-type]
    engine = InProcessReplay(
        policies_from_settings(settings.summary, settings.llm.model), lambda app: summarizer, SummaryCache()
    )
    records = records_of(backend.published)
    ask = Summarize(app_name=KEY.app_name, user_id=KEY.user_id, session_id=KEY.session_id, command_id="c1",
                    filter_key="app/research", force=True)  # fmt: skip
    records.append((0, len(records), KEY.kafka_key(), ask.model_dump_json().encode()))
    stats = await engine.run(records)
    texts = {k.rsplit("\x1f", 1)[1]: v[-1] for k, v in stats.texts.items()}
    assert set(markers(texts["app/research"])) == {"M1", "M2", "R1", "R2"}
    assert set(markers(texts[""])) == {"M1", "M2", "R1", "R2", "I1", "I2"}
