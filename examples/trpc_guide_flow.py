"""The Python guide's Session Summarizer flow, on distill (trpc-agent-py; the ``trpc`` extra).

This is the guide's example (Runner + LlmAgent + a list of conversations, then
the summary and its compression ratio) with one line changed: the session
service is ``DistillSessionService`` instead of ``InMemorySessionService``.
Events go to Kafka, the distill worker summarizes by the summarizer's own
triggers (``set_summarizer_conversation_threshold(3)``, ``keep_recent_count=4``),
and each run's session is read back from Cassandra: the summary, then the
events after it.

Run (from the repository root, after ``make venv``)::

    .venv/bin/python examples/trpc_guide_flow.py

It starts (or reuses) the local Kafka and Cassandra, and a worker and a
projector on topics of its own. The agent's model is a scripted stand-in
(``scripted_agent_endpoint.py``): no key, no network. ``--no-pipeline`` uses the
worker and projector the ``DISTILL_*`` settings name instead.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scripted_agent_endpoint import MODEL_NAME, ScriptedAgentEndpoint
from trpc_agent_sdk.agents import LlmAgent
from trpc_agent_sdk.models import OpenAIModel
from trpc_agent_sdk.runners import Runner
from trpc_agent_sdk.sessions import SessionSummarizer, SummarizerSessionManager, set_summarizer_conversation_threshold
from trpc_agent_sdk.types import Content, Part

from streams.adapters.trpc_session import DistillSessionService

app_name = "trpc_guide_flow"
user_id = "learner"
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


async def run_agent(runner: Runner, user_id: str, session_id: str, user_input: str) -> str:
    """One user turn through the Runner; returns the final answer text."""
    answer = ""
    message = Content(role="user", parts=[Part.from_text(text=user_input)])
    async for event in runner.run_async(user_id=user_id, session_id=session_id, new_message=message):
        if event.is_final_response() and event.content and event.content.parts:
            answer = "".join(p.text or "" for p in event.content.parts if not p.thought)
    return answer


def build_summarizer_manager(model: OpenAIModel) -> SummarizerSessionManager:
    """The guide's summarizer: every 3 conversations, keep the last 4, summaries of at most 600 characters."""
    summarizer_count = 3
    summarizer = SessionSummarizer(
        model=model,
        check_summarizer_functions=[set_summarizer_conversation_threshold(summarizer_count)],
        max_summary_length=600,
        keep_recent_count=4,
    )
    return SummarizerSessionManager(model=model, summarizer=summarizer, auto_summarize=True)


SUMMARY_WAIT_S = 20.0
"""How long the guide flow waits at a checkpoint for the summary a trigger asked for (the worker's job)."""


async def _summary_of(session_service: DistillSessionService, session: Any, wait_s: float) -> Any:
    """The session's summary, polled for up to ``wait_s`` seconds while there is none yet."""
    deadline = time.monotonic() + wait_s
    while True:
        summary = await session_service.summarizer_manager.get_session_summary(session)
        if summary or time.monotonic() >= deadline:
            return summary
        await asyncio.sleep(0.2)
        session = await session_service.get_session(
            app_name=session.app_name, user_id=session.user_id, session_id=session.id
        )


async def guide_flow(model: OpenAIModel, summarizer_manager: SummarizerSessionManager, session_id: str) -> None:
    """The guide's flow, as written there, but for the session service line."""
    agent = LlmAgent(name="assistant", model=model, instruction="You are a patient Python tutor.")
    summarizer_count = 3

    session_service = DistillSessionService(summarizer_manager=summarizer_manager)
    runner = Runner(app_name=app_name, agent=agent, session_service=session_service)

    for i, user_input in enumerate(conversations):
        await run_agent(runner=runner, user_id=user_id, session_id=session_id, user_input=user_input)
        if i % summarizer_count == 0:
            session = await session_service.get_session(app_name=app_name, user_id=user_id, session_id=session_id)
            if session:
                # trpc's in-process manager has summarized by now; distill's worker does it beside the
                # agent. The guide's triggers (3 conversations, 4 kept) fire first after round 5: from
                # the checkpoint after that on, wait for the summary.
                expected = i >= 2 * summarizer_count
                summary = await _summary_of(session_service, session, wait_s=SUMMARY_WAIT_S if expected else 0.0)
                if summary:
                    print(f"   - 总结文本: {summary.summary_text[:100]}...")
                    print(f"   - 原始事件数: {summary.original_event_count}")
                    print(f"   - 压缩后事件数: {summary.compressed_event_count}")
                    print(f"   - 压缩比例: {summary.get_compression_ratio():.1f}%")

    # 手动会话总结 (force=True: not bound by the triggers)
    session = await session_service.get_session(app_name=app_name, user_id=user_id, session_id=session_id)
    await session_service.summarizer_manager.create_session_summary(session, force=True)
    if session:
        summary = await session_service.summarizer_manager.get_session_summary(session)
        if summary:
            print(f"   - 总结文本: {summary.summary_text[:100]}...")
            print(f"   - 总结时间: {time.ctime(summary.summary_timestamp)}")
            print(f"   - 原始事件数: {summary.original_event_count}")
            print(f"   - 压缩后事件数: {summary.compressed_event_count}")
            print(f"   - 压缩比例: {summary.get_compression_ratio():.1f}%")
    await session_service.close()


RECALL_QUESTION = "之前我说我的学习目标是什么？"


async def recall_flow(model: OpenAIModel, session_id: str) -> None:
    """Beyond the guide: an agent with distill's recall tools asks about the first turn, long summarized away."""
    session_service = DistillSessionService()
    agent = LlmAgent(name="assistant", model=model, instruction="You are a patient Python tutor.",
                     tools=session_service.recall_tools())  # fmt: skip
    runner = Runner(app_name=app_name, agent=agent, session_service=session_service)
    message = Content(role="user", parts=[Part.from_text(text=RECALL_QUESTION)])
    async for event in runner.run_async(user_id=user_id, session_id=session_id, new_message=message):
        for part in (event.content.parts or []) if event.content and not event.partial else []:
            if part.function_call:
                arguments = json.dumps(part.function_call.args, ensure_ascii=False)
                print(f"   - tool call {part.function_call.name} {arguments}")
            if part.text and event.is_final_response():
                print(f"   - answer: {part.text[:200]}")
    await session_service.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-pipeline", action="store_true", help="Use the worker and projector already running.")
    parser.add_argument("--session-id", default=f"guide-{int(time.time())}")
    args = parser.parse_args()
    with ScriptedAgentEndpoint() as endpoint:
        model = OpenAIModel(model_name=MODEL_NAME, api_key="offline", base_url=endpoint.base_url)
        manager = build_summarizer_manager(model)
        if args.no_pipeline:
            asyncio.run(guide_flow(model, manager, args.session_id))
            asyncio.run(recall_flow(model, args.session_id))
        else:
            _with_pipeline(model, manager, args.session_id)
        report_prompts(endpoint.requests[: len(conversations)])


def report_prompts(requests: list[dict[str, object]]) -> None:
    """Per turn: the messages the framework sent, against the full history it would have sent without distill."""
    for turn, request in enumerate(requests):
        messages = request.get("messages") or []
        full = 2 + 2 * turn  # the system message, every earlier user + assistant message, this user message
        summary = any("Previous conversation summary" in json.dumps(m, ensure_ascii=False) for m in messages)  # type: ignore[attr-defined]
        print(
            f"turn {turn + 1}: {len(messages)} messages sent (full history {full}){' with summary' if summary else ''}"
        )


def _with_pipeline(model: OpenAIModel, manager: SummarizerSessionManager, session_id: str) -> None:
    from distill_pipeline import run_with_pipeline

    from streams.adapters.trpc_session import summarizer_overrides

    overrides = summarizer_overrides(manager.summarizer)

    async def both() -> None:
        await guide_flow(model, manager, session_id)
        await recall_flow(model, session_id)

    run_with_pipeline("trpc-guide", app_name, overrides, both)


if __name__ == "__main__":
    main()
