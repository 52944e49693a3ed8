"""An agent loop on distill: publish every event, assemble each request, answer recall tools.

Run (from the repository root, after ``make venv``)::

    .venv/bin/python examples/agent_loop.py

It starts (or reuses) the local Kafka and Cassandra, creates the topics and
tables, starts a worker and a projector, and plays a short conversation.
Before each model call it reads the latest summary from Cassandra and builds
the request with ``streams.context.assemble``: the summary injected into the
system message, the history cut at the summary's boundary, old tool results
compacted, and the ``session_search`` / ``session_load`` tools offered. Tool
calls for those are answered from Cassandra; ``get_weather`` is a local tool.

The model is whatever OpenAI-compatible endpoint the settings name
(``DISTILL_LLM__BASE_URL``, ``DISTILL_LLM__API_KEY``, ``DISTILL_LLM__MODEL``);
with none configured it is ``offline_chat_endpoint.py``, a scripted stand-in
that needs no key and no network.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from openai import AsyncOpenAI

sys.path.insert(0, str(Path(__file__).resolve().parent))

from offline_chat_endpoint import MODEL_NAME, OfflineChatEndpoint

from projections.read_api import SessionReader
from schemas import Message, SessionEvent, SessionKey, ToolCall
from schemas.settings import Settings, load_settings
from streams.cassandra_connection import cassandra_session
from streams.client import DistillClient
from streams.context.assembly import AssemblyOptions, assemble
from streams.context.compaction import CompactionConfig
from streams.context.recall_tools import RecallCapabilities, RecallExecutor
from streams.local_pipeline import LocalPipeline
from streams.recall_reader import CassandraRecallReader

SYSTEM_PROMPT = "You are a travel assistant. Be brief and precise."
TURNS = [
    "Hi! I'm planning a trip to Lisbon and Porto in May. What's the weather in both?",
    "My budget is 1200 EUR and I never fly before 9am. Please keep that in mind.",
    "And what's the weather in Madrid and Seville?",
    "I prefer trains over buses for the legs between cities.",
    "What's the weather in Berlin, where I fly from?",
    "What did you tell me earlier about the weather in Porto?",
]
WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Daily forecast for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def get_weather(city: str) -> str:
    """A local tool with a deliberately large answer (compaction shrinks it in later requests)."""
    seed = sum(map(ord, city))
    days = [
        {"day": f"05-{12 + d}", "max_c": 15 + (seed + d) % 12, "rain_pct": (seed * (d + 3)) % 80} for d in range(14)
    ]
    return json.dumps({"city": city, "daily": days, "source": "example-forecast"})


class Agent:
    """One session: the events it published, in order, and how to reach distill."""

    def __init__(self, settings: Settings, client: DistillClient, reader: SessionReader, key: SessionKey) -> None:
        self.settings, self.client, self.reader, self.key = settings, client, reader, key
        self.events: list[SessionEvent] = []
        self.recall = RecallExecutor(
            CassandraRecallReader(reader), app_name=key.app_name, user_id=key.user_id, session_id=key.session_id
        )

    async def publish(self, message: Message, author: str, request_id: str) -> None:
        event = SessionEvent(
            app_name=self.key.app_name, user_id=self.key.user_id, session_id=self.key.session_id,
            event_id=f"ev-{len(self.events) + 1:04d}-{uuid.uuid4().hex[:6]}", timestamp=datetime.now(UTC),
            invocation_id=request_id, request_id=request_id, author=author, message=message,
        )  # fmt: skip
        await self.client.publish(event)
        self.events.append(event)

    async def request(self, llm: AsyncOpenAI, model: str) -> tuple[Message, dict[str, Any]]:
        # The prompt takes the key's own summary only (for "" there is no ancestor): get_summary's
        # "any key" fallback is for display and would cut this history at another branch's boundary.
        stored = await self.reader.latest_summary(self.key)
        recall = RecallCapabilities(search=True, load=True)
        built = assemble(
            SYSTEM_PROMPT, stored.record if stored else None, self.events, tools=[WEATHER_TOOL],
            options=AssemblyOptions(
                add_session_summary=True, compaction=CompactionConfig(enabled=True, tool_result_max_tokens=100),
                recall=recall, token_budget=8000,
            ),
        )  # fmt: skip
        full = assemble(SYSTEM_PROMPT, None, self.events, tools=[WEATHER_TOOL], options=AssemblyOptions(recall=recall))
        response = await llm.chat.completions.create(model=model, messages=built.messages, tools=built.tools)  # type: ignore[arg-type]
        choice = response.choices[0].message
        calls = tuple(
            ToolCall(id=c.id, function={"name": c.function.name, "arguments": c.function.arguments})  # type: ignore[union-attr]
            for c in choice.tool_calls or ()
        )
        stats = {
            "messages": len(built.messages),
            "prompt_tokens": built.report.prompt_tokens,
            "full_history_tokens": full.report.prompt_tokens,
            "summary_version": stored.version if stored else None,
        }
        return Message(role="assistant", content=choice.content, tool_calls=calls), stats

    async def answer_tool(self, call: ToolCall) -> Message:
        if self.recall.handles(call.function.name):
            return await self.recall.execute(call)
        city = json.loads(call.function.arguments or "{}").get("city", "")
        return Message(role="tool", tool_call_id=call.id, name=call.function.name, content=get_weather(city))

    async def turn(self, text: str, llm: AsyncOpenAI, model: str) -> None:
        request_id = f"req-{uuid.uuid4().hex[:8]}"
        await self.publish(Message(role="user", content=text), "user", request_id)
        print(f"\nuser: {text}")
        for _ in range(4):  # a bounded number of tool rounds per turn
            reply, stats = await self.request(llm, model)
            print(f"   [request: {stats['messages']} messages, ~{stats['prompt_tokens']} tokens "
                  f"(full history ~{stats['full_history_tokens']}), summary v{stats['summary_version']}]")  # fmt: skip
            await self.publish(reply, "assistant", request_id)
            if not reply.tool_calls:
                print(f"assistant: {reply.content}")
                return
            for call in reply.tool_calls:
                print(f"   tool call {call.function.name}({call.function.arguments})")
                await self.publish(await self.answer_tool(call), "assistant", request_id)


async def run(settings: Settings, llm: AsyncOpenAI, model: str, pause: float) -> None:
    key = SessionKey("example-agent", "example-user", f"session-{uuid.uuid4().hex[:8]}")
    with cassandra_session(settings.cassandra, settings.cassandra.keyspace) as session:
        reader = SessionReader(session, settings.cassandra.keyspace)
        async with DistillClient(settings) as client:
            agent = Agent(settings, client, reader, key)
            for text in TURNS:
                await agent.turn(text, llm, model)
                await asyncio.sleep(pause)  # a user's think time: the worker summarizes meanwhile
            summary = await client.request_summary(key, wait=True, timeout=60, force=True)
            if summary is not None:
                print(f"\nfinal summary v{summary.version} by {summary.model}:\n{summary.summary}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-pipeline", action="store_true", help="Do not start a worker and a projector.")
    parser.add_argument("--event-threshold", type=int, default=6, help="Summarize after more than N events.")
    parser.add_argument("--pause", type=float, default=2.0, help="Seconds between user turns.")
    args = parser.parse_args()
    settings = load_settings()
    from streams.cli.init_cmd import command as init_command
    from streams.services.manager import LocalServices

    LocalServices(settings).up(print)
    init_command.main(args=[], standalone_mode=False)
    # A low event threshold for the example's worker, so summaries appear within a few turns.
    worker_env = {"DISTILL_SUMMARY__EVENT_THRESHOLD": str(args.event_threshold)}
    with LocalPipeline(Path(".distill") / "example", keep_running=args.no_pipeline, env=worker_env) as pipeline:
        if not args.no_pipeline:
            pipeline.wait_for_worker(120)
        if settings.llm.configured:
            key = settings.llm.api_key.get_secret_value() if settings.llm.api_key else "none"
            asyncio.run(
                run(settings, AsyncOpenAI(base_url=settings.llm.base_url, api_key=key), settings.llm.model, args.pause)
            )
            return
        with OfflineChatEndpoint() as endpoint:
            print(f"model: {MODEL_NAME} at {endpoint.base_url} (scripted stand-in; no LLM configured)")
            asyncio.run(
                run(settings, AsyncOpenAI(base_url=endpoint.base_url, api_key="offline"), MODEL_NAME, args.pause)
            )


if __name__ == "__main__":
    main()
