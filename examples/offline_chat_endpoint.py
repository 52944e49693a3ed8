"""A tiny OpenAI-compatible chat endpoint for running the example agent offline.

It is a scripted stand-in, not a language model: it reads the last message and
answers by rule — a weather question becomes one ``get_weather`` call per city
it recognises (parallel calls), a question about something said earlier becomes
a ``session_search`` call, a tool result is reported back, anything else is
acknowledged. It exists so that ``examples/agent_loop.py`` shows the whole
loop (events published, summaries injected, recall tools answered) with no API
key and no network. Point the example at a real endpoint with
``DISTILL_LLM__BASE_URL`` / ``DISTILL_LLM__API_KEY`` instead.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
import uuid
from typing import Any

from aiohttp import web

MODEL_NAME = "offline-scripted-agent"
CITIES = ("Lisbon", "Porto", "Madrid", "Seville", "Berlin")
RECALL_WORDS = re.compile(r"\b(earlier|previously|remind me|what did (you|i) (say|tell))\b", re.IGNORECASE)


def _tool_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": f"call_{uuid.uuid4().hex[:12]}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def _offered(tools: list[dict[str, Any]]) -> set[str]:
    return {t.get("function", {}).get("name", "") for t in tools}


def respond(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The assistant message answering ``messages`` (the whole rule book)."""
    last = messages[-1]
    offered = _offered(tools)
    if last["role"] == "tool":
        results = []
        for message in reversed(messages):
            if message["role"] != "tool":
                break
            results.append(str(message.get("content") or "")[:160])
        return {"role": "assistant", "content": "Here is what I found: " + " | ".join(reversed(results))}
    text = str(last.get("content") or "")
    if RECALL_WORDS.search(text) and "session_search" in offered:
        query = re.sub(RECALL_WORDS, "", text).strip(" ?.") or text
        return {"role": "assistant", "content": None,
                "tool_calls": [_tool_call("session_search", {"query": query, "scope": "current_session"})]}  # fmt: skip
    cities = [c for c in CITIES if c.lower() in text.lower()]
    if "weather" in text.lower() and cities and "get_weather" in offered:
        return {"role": "assistant", "content": None,
                "tool_calls": [_tool_call("get_weather", {"city": c}) for c in cities]}  # fmt: skip
    return {"role": "assistant", "content": f"Noted: {text[:200]}"}


def _approx_tokens(payload: Any) -> int:
    return max(1, len(json.dumps(payload)) // 4)


async def _chat(request: web.Request) -> web.Response:
    body = await request.json()
    message = respond(body.get("messages", []), body.get("tools") or [])
    prompt, completion = _approx_tokens(body.get("messages", [])), _approx_tokens(message)
    return web.json_response({
        "id": f"chatcmpl-{uuid.uuid4().hex[:16]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": MODEL_NAME,
        "choices": [{"index": 0, "message": message,
                     "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    })  # fmt: skip


class OfflineChatEndpoint:
    """The endpoint on 127.0.0.1 (ephemeral port) in a background thread."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", _chat)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    def __enter__(self) -> OfflineChatEndpoint:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
