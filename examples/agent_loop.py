"""An agent loop on distill's agent facade: every event published, every request read back from Cassandra.

Run (from the repository root, after ``make venv``)::

    .venv/bin/python examples/agent_loop.py

It starts (or reuses) the local Kafka and Cassandra, and a worker and a
projector on topics of their own, and plays a short conversation. The loop
(:func:`conversation`) is the README's wiring of :class:`streams.agent.DistillAgent`:
the user's message, then per model call ``next_request`` → the model →
``record`` → ``run_tools``. The agent keeps no history: each request is built
from the summary and the events Cassandra holds — the summary injected into
the system message, the history cut at its boundary, older tool results
compacted, the ``session_search`` / ``session_load`` tools offered and
answered from Cassandra, and the request fitted into the model's window.
``get_weather`` is a local tool.

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
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from openai import AsyncOpenAI

sys.path.insert(0, str(Path(__file__).resolve().parent))

from offline_chat_endpoint import MODEL_NAME, OfflineChatEndpoint

from schemas.settings import load_settings
from streams.adapters.backend import SessionBackend
from streams.agent import AgentRequest, DistillAgent, LocalTool

APP_NAME = "agent_loop"
SYSTEM_PROMPT = "You are a travel assistant. Be brief and precise."
TURNS = [
    "Hi! I'm planning a trip to Lisbon and Porto in May. What's the weather in both?",
    "My budget is 1200 EUR and I never fly before 9am. Please keep that in mind.",
    "And what's the weather in Madrid and Seville?",
    "I prefer trains over buses for the legs between cities.",
    "What's the weather in Berlin, where I fly from?",
    "What did I tell you earlier about my budget?",
]
WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Daily forecast for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
AGENT_OPTIONS: dict[str, Any] = {
    "enable_context_compaction": True,  # older tool results become placeholders naming their event
    "context_compaction_tool_result_max_tokens": 100,
    "sync_summary_intra_run": True,  # a summary check between the model calls of one run
}
"""Go's llmagent options for this agent (the rest are ``Settings.agent``'s, e.g. ``DISTILL_AGENT__...``)."""
MAX_STEPS = 4
"""Model calls per user turn at the most."""


def get_weather(city: str) -> str:
    """A local tool with a deliberately large answer (compaction shrinks it in later requests)."""
    seed = sum(map(ord, city))
    days = [
        {"day": f"05-{12 + d}", "max_c": 15 + (seed + d) % 12, "rain_pct": (seed * (d + 3)) % 80} for d in range(14)
    ]
    return json.dumps({"city": city, "daily": days, "source": "example-forecast"})


def describe(request: AgentRequest) -> str:
    """One line on what the facade built."""
    summary = f"summary v{request.summary.version}" if request.summary else "no summary"
    return (
        f"   [request: {len(request.messages)} messages, ~{request.report.prompt_tokens} tokens, {summary}, "
        f"{request.report.compaction.placeholders} results compacted, {request.dropped_messages} dropped]"
    )


async def conversation(
    agent: DistillAgent,
    llm: AsyncOpenAI,
    model: str,
    turns: Sequence[str] = TURNS,
    tools: Mapping[str, LocalTool] | None = None,
    before_turn: Callable[[int], Awaitable[None]] | None = None,
) -> list[AgentRequest]:
    """Play ``turns`` through ``agent``; returns every request it built (in order)."""
    local: Mapping[str, LocalTool] = tools if tools is not None else {"get_weather": get_weather}
    requests: list[AgentRequest] = []
    for i, text in enumerate(turns):
        if before_turn is not None:
            await before_turn(i)
        print(f"\nuser: {text}")
        await agent.user(text)
        for _ in range(MAX_STEPS):
            request = await agent.next_request(SYSTEM_PROMPT, tools=[WEATHER_TOOL])
            response = await llm.chat.completions.create(model=model, **request.kwargs())
            reply = response.choices[0].message
            await agent.record(reply, usage=response.usage)
            requests.append(request)
            print(describe(request))
            if not await agent.run_tools(reply, local):
                print(f"assistant: {reply.content}")
                break
            for call in reply.tool_calls or ():
                print(f"   tool call {call.function.name}({call.function.arguments})")
    return requests


async def run(llm: AsyncOpenAI, model: str, pause: float) -> None:
    async with SessionBackend(load_settings()) as backend:
        agent = DistillAgent(backend, app_name=APP_NAME, user_id="example-user",
                             session_id=f"session-{uuid.uuid4().hex[:8]}", model=model, **AGENT_OPTIONS)  # fmt: skip

        async def think(turn: int) -> None:
            if turn:
                await asyncio.sleep(pause)  # a user's think time: the worker summarizes meanwhile

        await conversation(agent, llm, model, before_turn=think)
        summary = await agent.summarize(force=True)
        if summary is not None:
            print(f"\nfinal summary v{summary.version} by {summary.model}:\n{summary.summary}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-pipeline", action="store_true", help="Use the worker and projector already running.")
    parser.add_argument("--event-threshold", type=int, default=6, help="Summarize after more than N events.")
    parser.add_argument("--pause", type=float, default=1.0, help="Seconds between user turns.")
    args = parser.parse_args()
    settings = load_settings()
    if settings.llm.configured:
        key = settings.llm.api_key.get_secret_value() if settings.llm.api_key else "none"
        _run(args, AsyncOpenAI(base_url=settings.llm.base_url, api_key=key), settings.llm.model)
        return
    with OfflineChatEndpoint() as endpoint:
        print(f"model: {MODEL_NAME} at {endpoint.base_url} (scripted stand-in; no LLM configured)")
        _run(args, AsyncOpenAI(base_url=endpoint.base_url, api_key="offline"), MODEL_NAME)


def _run(args: argparse.Namespace, llm: AsyncOpenAI, model: str) -> None:
    flow = lambda: run(llm, model, args.pause)  # noqa: E731
    if args.no_pipeline:
        asyncio.run(flow())
        return
    from distill_pipeline import run_with_pipeline

    # A low event threshold for this app, so summaries appear within a few turns.
    run_with_pipeline("agent-loop", APP_NAME, {"event_threshold": args.event_threshold}, flow)


if __name__ == "__main__":
    main()
