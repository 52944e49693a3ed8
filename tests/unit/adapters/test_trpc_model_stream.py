"""trpc-agent-py's streamed OpenAI model call returns on a keep-alive HTTP/1.1 connection (the trpc extra's pins).

With openai >= 3.30 the SDK drains the SSE body itself after ``[DONE]`` while
trpc-agent-py 1.2.0's ``OpenAIModel`` holds a paused read on the same body:
the call never returns. The ``trpc`` extra pins ``openai<3.30``; this test
catches an environment (or a later pin) where the two disagree again.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

pytest.importorskip("trpc_agent_sdk.runners", exc_type=ImportError)
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))

from scripted_agent_endpoint import MODEL_NAME, ScriptedAgentEndpoint
from trpc_agent_sdk.agents import LlmAgent
from trpc_agent_sdk.models import OpenAIModel
from trpc_agent_sdk.runners import Runner
from trpc_agent_sdk.sessions import InMemorySessionService
from trpc_agent_sdk.types import Content, Part


async def _turns(base_url: str, texts: list[str]) -> list[str]:
    model = OpenAIModel(model_name=MODEL_NAME, api_key="offline", base_url=base_url)
    agent = LlmAgent(name="assistant", model=model, instruction="Answer briefly.")
    runner = Runner(app_name="stream-check", agent=agent, session_service=InMemorySessionService())
    answers = []
    for text in texts:
        message = Content(role="user", parts=[Part.from_text(text=text)])
        async for event in runner.run_async(user_id="u", session_id="s", new_message=message):
            if event.is_final_response() and event.content and event.content.parts:
                answers.append("".join(p.text or "" for p in event.content.parts))
    return answers


def test_streamed_calls_return_on_a_keep_alive_connection() -> None:
    with ScriptedAgentEndpoint() as endpoint:
        try:
            answers = asyncio.run(asyncio.wait_for(_turns(endpoint.base_url, ["你好", "second turn"]), 15))
        except TimeoutError:
            pytest.fail("trpc-agent-py's streamed model call did not return: is openai >= 3.30 installed?")
        assert [r.get("stream") for r in endpoint.requests] == [True, True]
    assert answers == ["Noted: 你好", "Noted: second turn"]
