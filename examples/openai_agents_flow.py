"""The OpenAI Agents SDK with distill as its session (the ``agents`` extra).

An ``Agent`` run by the SDK's ``Runner`` over chat completions
(``OpenAIChatCompletionsModel`` + ``AsyncOpenAI``), its history kept by
``DistillSession``: ``add_items`` publishes each item to Kafka, ``get_items``
returns distill's summary and the items after its boundary (from Cassandra),
and ``session.recall_tools()`` gives the agent ``session_search`` /
``session_load``. Ten conversations, then a question about the first one.

Run (from the repository root, after ``make venv``)::

    .venv/bin/python examples/openai_agents_flow.py

It starts (or reuses) the local Kafka and Cassandra, and a worker and a
projector on topics of their own; the app summarizes every 3 conversations,
keeping the last 2. The model is a scripted stand-in
(``scripted_agent_endpoint.py``) served over HTTP: no key, no network.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
from openai import AsyncOpenAI
from scripted_agent_endpoint import MODEL_NAME, ScriptedAgentEndpoint

from schemas.settings import load_settings
from streams.adapters.backend import SessionBackend
from streams.adapters.openai_agents_session import DistillSession

APP_NAME = "agents_flow"
SUMMARY = {"conversation_threshold": 3, "keep_recent_rounds": 2}  # this app's [summary.apps.agents_flow]
conversations = [
    "你好！我想学习 Python，我的目标是三个月内做出一个数据分析项目。",
    "What are Python's basic data types?",
    "列表和元组有什么区别？",
    "How do I write a function with default arguments?",
    "我决定先学 pandas，然后再学 matplotlib。",
    "What is a list comprehension?",
    "How do I read a CSV file with pandas?",
    "请给我推荐一个适合初学者的练习项目。",
    "How should I structure a small project into modules?",
    "What are virtual environments for?",
]
RECALL_QUESTION = "之前我说我的学习目标是什么？"


async def agents_flow(base_url: str, session_id: str, pause: float) -> None:
    set_tracing_disabled(True)  # the SDK would otherwise export traces to OpenAI
    model = OpenAIChatCompletionsModel(
        model=MODEL_NAME, openai_client=AsyncOpenAI(base_url=base_url, api_key="offline")
    )
    async with SessionBackend(load_settings()) as backend:
        session = DistillSession(session_id, backend, app_name=APP_NAME, user_id="learner")
        agent = Agent(name="assistant", instructions="You are a patient Python tutor.", model=model,
                      tools=session.recall_tools())  # fmt: skip
        for text in conversations:
            result = await Runner.run(agent, text, session=session)
            print(f"> {text}\n  {result.final_output}")
            await asyncio.sleep(pause)  # a person reads the answer; the worker summarizes meanwhile
        result = await Runner.run(agent, RECALL_QUESTION, session=session)
        for item in result.new_items:
            raw = item.raw_item
            if item.type == "tool_call_item":
                print(f"   - tool call {raw.name} {raw.arguments}")  # type: ignore[union-attr]
        print(f"   - answer: {result.final_output}")
        view = session.last_view
        if view is not None and view.summary is not None:
            print(f"summary v{view.summary.version}: {len(view.events)} events after it, "
                  f"{view.stored_events} stored")  # fmt: skip


def report_prompts(requests: list[dict[str, object]]) -> None:
    """Per conversation turn: the messages the SDK sent, against the full history it would send without distill."""
    turns = [r for r in requests if (r.get("messages") or [{}])[-1].get("role") == "user"]  # type: ignore[index,union-attr]
    for turn, request in enumerate(turns[: len(conversations)]):
        messages = request.get("messages") or []
        full = 2 + 2 * turn  # the instructions, every earlier user + assistant message, this user message
        summary = any("Summary of the earlier conversation" in json.dumps(m, ensure_ascii=False) for m in messages)  # type: ignore[attr-defined]
        print(
            f"turn {turn + 1}: {len(messages)} messages sent (full history {full}){' with summary' if summary else ''}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-pipeline", action="store_true", help="Use the worker and projector already running.")
    parser.add_argument("--session-id", default=f"agents-{int(time.time())}")
    parser.add_argument("--pause", type=float, default=0.8, help="Seconds between turns.")
    args = parser.parse_args()
    with ScriptedAgentEndpoint() as endpoint:
        flow = lambda: agents_flow(endpoint.base_url, args.session_id, args.pause)  # noqa: E731
        if args.no_pipeline:
            asyncio.run(flow())
        else:
            from distill_pipeline import run_with_pipeline

            run_with_pipeline("agents-flow", APP_NAME, SUMMARY, flow)
        report_prompts(endpoint.requests)


if __name__ == "__main__":
    main()
