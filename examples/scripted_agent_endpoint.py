"""A scripted OpenAI-compatible chat endpoint for the framework adapter examples (streaming too).

Not a language model: it answers by rule, so the examples run offline and their
tests can check what reached the model. It records every request body.

- a user message asking about something said earlier → ``session_search`` in the
  default scope (what summaries hid);
- a ``session_search`` result with hits → a ``session_load`` call on the best hit
  that is not itself a recall question;
- a ``session_load`` result → "From the history: <the anchor's text>";
- anything else → "Noted: <the message>".

``stream: true`` requests get server-sent chunks (text and tool-call deltas),
as trpc-agent-py's default streaming mode asks for.
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

MODEL_NAME = "scripted-agent"
RECALL = re.compile(r"\b(earlier|previously|remind me)\b|之前|刚才", re.IGNORECASE)


def _call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}}  # fmt: skip


def _json(text: Any) -> Any:
    try:
        return json.loads(text) if isinstance(text, str) else None
    except json.JSONDecodeError:
        return None


def respond(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The assistant message answering ``messages`` (the whole rule book)."""
    offered = {t.get("function", {}).get("name", "") for t in tools}
    last = messages[-1] if messages else {"role": "user", "content": ""}
    if last.get("role") == "tool":
        body = _json(last.get("content"))
        hits = [r for r in body.get("results") or [] if not RECALL.search(str(r.get("snippet", "")))] \
            if isinstance(body, dict) else []  # fmt: skip
        if hits and "session_load" in offered:  # the best hit that is not a recall question itself
            return {"role": "assistant", "content": None,
                    "tool_calls": [_call("session_load", {"event_id": hits[0]["event_id"],
                                                          "before": 0, "after": 0})]}  # fmt: skip
        if isinstance(body, dict) and body.get("messages"):
            anchor = next((m for m in body["messages"] if m.get("anchor")), body["messages"][0])
            return {"role": "assistant", "content": f"From the history: {anchor.get('content', '')[:300]}"}
        return {"role": "assistant", "content": f"Tool said: {str(last.get('content'))[:200]}"}
    text = last.get("content") or ""
    if isinstance(text, list):
        text = "".join(p.get("text", "") for p in text if isinstance(p, dict))
    if RECALL.search(text) and "session_search" in offered:
        query = RECALL.sub("", text).strip(" ?.？。") or text  # the default scope: what summaries hid
        return {"role": "assistant", "content": None,
                "tool_calls": [_call("session_search", {"query": query})]}  # fmt: skip
    return {"role": "assistant", "content": f"Noted: {text[:200]}"}


def _tokens(payload: Any) -> int:
    return max(1, len(json.dumps(payload, ensure_ascii=False)) // 4)


class ScriptedAgentEndpoint:
    """The endpoint on 127.0.0.1 (ephemeral port) in a background thread; ``requests`` holds every body."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        message = respond(body.get("messages", []), body.get("tools") or [])
        usage = {"prompt_tokens": _tokens(body.get("messages", [])), "completion_tokens": _tokens(message)}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        head = {"id": f"chatcmpl-{uuid.uuid4().hex[:16]}", "created": int(time.time()), "model": MODEL_NAME}
        if not body.get("stream"):
            choice = {"index": 0, "message": message, "finish_reason": finish}
            return web.json_response({**head, "object": "chat.completion", "usage": usage, "choices": [choice]})
        delta: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
        if message.get("tool_calls"):
            delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(message["tool_calls"])]
        chunks = [
            {"index": 0, "delta": delta, "finish_reason": None},
            {"index": 0, "delta": {}, "finish_reason": finish},
        ]
        lines = [{**head, "object": "chat.completion.chunk", "choices": [c]} for c in chunks]
        lines.append({**head, "object": "chat.completion.chunk", "choices": [], "usage": usage})
        sse = "".join(f"data: {json.dumps(line, ensure_ascii=False)}\n\n" for line in lines) + "data: [DONE]\n\n"
        # The whole stream in one sized body: clients that drain the body to its end never wait on the socket.
        return web.Response(body=sse.encode(), content_type="text/event-stream")

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    def __enter__(self) -> ScriptedAgentEndpoint:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
