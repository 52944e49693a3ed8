"""A real HTTP server speaking the OpenAI chat-completions API, with scripted replies.

Tests and benchmarks point the real ``openai`` client at ``server.base_url``.
The server runs its own event loop in a background thread, so it serves
sync tests, async tests and other processes' loops alike.

Replies are consumed in order from :meth:`OpenAIServer.script`; when the
script is empty the ``default`` reply answers (the zero-latency echo summary
unless told otherwise). Every request body is recorded in ``requests``.

    with OpenAIServer() as server:
        server.script(rate_limited(retry_after=0.2), answer("ok"))
        ...  # AsyncOpenAI(base_url=server.base_url, api_key="k")
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.support.threaded_server import ThreadedServer


@dataclass(frozen=True)
class Reply:
    """One scripted reply: an HTTP status, a JSON body, headers and a delay before answering."""

    status: int = 200
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    text: str | None = None
    usage: dict[str, int] | None = None


Behaviour = Callable[[dict[str, Any]], Reply]
"""Builds a reply from the request body (used for the default reply)."""


def answer(
    text: str,
    *,
    prompt_tokens: int | None = None,
    cached_tokens: int = 0,
    completion_tokens: int | None = None,
    delay_s: float = 0.0,
) -> Reply:
    """A normal completion with usage (computed from the texts when not given)."""
    usage = {"cached_tokens": cached_tokens}
    if prompt_tokens is not None:
        usage["prompt_tokens"] = prompt_tokens
    if completion_tokens is not None:
        usage["completion_tokens"] = completion_tokens
    return Reply(text=text, usage=usage, delay_s=delay_s)


def empty_answer() -> Reply:
    """A completion whose content is empty."""
    return Reply(text="", usage={})


def slow(delay_s: float, text: str = "late summary") -> Reply:
    """A normal completion that only starts after ``delay_s`` seconds."""
    return answer(text, delay_s=delay_s)


def _error(status: int, message: str, type_: str, code: str | None, headers: dict[str, str] | None = None) -> Reply:
    body = {"error": {"message": message, "type": type_, "param": None, "code": code}}
    return Reply(status=status, body=body, headers=headers or {})


def context_length_exceeded(tokens: int = 200_000, limit: int = 128_000) -> Reply:
    """HTTP 400 with OpenAI's ``context_length_exceeded`` code and wording."""
    return _error(
        400,
        f"This model's maximum context length is {limit} tokens. However, your messages resulted in "
        f"{tokens} tokens. Please reduce the length of the messages.",
        "invalid_request_error",
        "context_length_exceeded",
    )


def rate_limited(retry_after: float = 0.2) -> Reply:
    """HTTP 429 with a ``Retry-After`` header (seconds)."""
    return _error(
        429,
        "Rate limit reached for requests",
        "requests",
        "rate_limit_exceeded",
        {"Retry-After": f"{retry_after:g}"},
    )


def server_error(status: int = 500) -> Reply:
    """An HTTP 5xx."""
    return _error(status, "The server had an error while processing your request.", "server_error", None)


def bad_request(message: str = "Invalid value for 'messages'.") -> Reply:
    """A plain HTTP 400 that is not about the context length."""
    return _error(400, message, "invalid_request_error", "invalid_value")


def echo_summary(request: dict[str, Any]) -> Reply:
    """Zero-latency deterministic answer: the first words of the last user message.

    Good enough for pipeline tests and benchmarks that need an answer, not a
    good summary.
    """
    users = [m for m in request.get("messages", []) if m.get("role") == "user"]
    content = users[-1].get("content") if users else ""
    words = str(content or "").split()
    return answer("summary: " + " ".join(words[:40]))


def delayed(behaviour: Behaviour, delay_s: float) -> Behaviour:
    """``behaviour``'s reply, answered after ``delay_s`` seconds (a slow model)."""

    def slow(request: dict[str, Any]) -> Reply:
        return dataclasses.replace(behaviour(request), delay_s=delay_s)

    return slow


def _approx_tokens(text: str) -> int:
    return max(1, len(text) // 4) if text else 0


@dataclass
class Received:
    """A request the server received (``reply``: what it answered, once chosen)."""

    body: dict[str, Any]
    headers: dict[str, str]
    at: float
    reply: Reply | None = None

    @property
    def succeeded(self) -> bool:
        """Answered 200 with a non-empty completion."""
        return self.reply is not None and self.reply.status == 200 and bool(self.reply.text)

    def text(self) -> str:
        """Every message content of the request, joined (what a model reads)."""
        return request_text(self.body)


class OpenAIServer(ThreadedServer):
    """``POST /v1/chat/completions`` on 127.0.0.1 with an ephemeral port."""

    path = "/v1/chat/completions"
    thread_name = "openai-test-server"

    def __init__(self, default: Behaviour = echo_summary, model: str = "scripted-model") -> None:
        self.default = default
        self.model = model
        self.requests: list[Received] = []
        self._script: deque[Reply] = deque()
        self._lock = threading.Lock()
        super().__init__()

    def script(self, *replies: Reply) -> None:
        """Queue replies for the next requests, in order."""
        with self._lock:
            self._script.extend(replies)

    def pending(self) -> int:
        """Scripted replies not consumed yet."""
        with self._lock:
            return len(self._script)

    def _next(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            if self._script:
                return self._script.popleft()
        return self.default(body)

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        received = Received(body, dict(request.headers), time.monotonic())
        with self._lock:
            self.requests.append(received)
        reply = self._next(body)
        received.reply = reply
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        if reply.text is None:
            return web.json_response(reply.body or {}, status=reply.status, headers=reply.headers)
        return web.json_response(self._completion(body, reply), status=reply.status, headers=reply.headers)

    def _completion(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        text = reply.text or ""
        usage = dict(reply.usage or {})
        prompt_text = json.dumps(body.get("messages", []))
        prompt_tokens = usage.get("prompt_tokens", _approx_tokens(prompt_text))
        completion_tokens = usage.get("completion_tokens", _approx_tokens(text))
        return {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", self.model),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
                "prompt_tokens_details": {"cached_tokens": usage.get("cached_tokens", 0)},
            },
        }


def request_text(body: dict[str, Any]) -> str:
    """Every message content (and tool-call argument) of a chat-completions request, joined."""
    parts: list[str] = []
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, list):
            parts.extend(str(p.get("text", "")) for p in content if isinstance(p, dict))
        elif content:
            parts.append(str(content))
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            parts.append(f"{function.get('name', '')} {function.get('arguments', '')}")
    return "\n".join(parts)


def model_tokens(text: str) -> int:
    """Tokens as a real tokenizer roughly counts them: a CJK (non-ASCII) character is one
    token, ASCII text four characters a token — so CJK text costs the model more than
    distill's simple counter (four characters a token for any script) estimates."""
    wide = sum(1 for ch in text if ord(ch) > 0x7F)
    return wide + (len(text) - wide) // 4


@dataclass(frozen=True)
class FaultMix:
    """Rates of the faults :class:`MarkerEcho` injects (each request draws once)."""

    server_error: float = 0.08
    rate_limited: float = 0.05
    empty: float = 0.03
    slow: float = 0.10
    slow_s: tuple[float, float] = (0.05, 0.4)
    retry_after_s: float = 0.2
    context_window: int | None = None
    """Tokens (:func:`model_tokens`); a larger request gets ``context_length_exceeded``."""


@dataclass
class EchoStyle:
    """How a summary is written for requests whose text contains ``trigger``.

    Each marker (or cut) is written as ``item``, the items separated by ``joiner``;
    the summary is padded with ``padding`` sentences up to ``length`` characters
    (a model that writes more than asked: what a length cap must cut without
    losing what comes first).
    """

    trigger: str
    head: str
    joiner: str
    tail: str
    item: str = "{}"
    padding: str = ""
    length: int = 0


ENGLISH = EchoStyle(
    "", "Summary of the conversation so far:\n", "\n", "\n",
    "- {}: the request, the decision taken and the figures given are kept as stated",
)  # fmt: skip
"""Prose around every marker, so previous summaries weigh in the budget as a real model's do."""
CHINESE_CAPPED = EchoStyle(
    "请总结以下对话", "对话摘要：", "、", "。", "{}", "用户确认了行程安排，并要求保留所有细节以便稍后继续。", 720
)
"""For the Python guide's Chinese prompt: no space anywhere, padded past a 600-character cap."""
SHORTENED = EchoStyle("characters long, over its limit of", "摘要：", "、", "。")
"""The same model asked to shorten its own answer (distill's ``shorten`` call, over ``max_summary_length``):
the markers and cuts only. Put it first: the request holds the answer it shortens, whose text may match
another style's trigger."""


class MarkerEcho:
    """The default behaviour of a fault-injecting, marker-echoing model.

    Answers with every marker (:mod:`tests.support.markers`) found in the request,
    in order, and every payload cut it saw (``session_load(event_id=…)``), so
    markers roll forward through previous summaries exactly as far as they reached
    the model. Faults are drawn from ``mix`` by a seeded generator keyed by the
    request's content and how often that content was seen: the same scenario gets
    the same faults whatever order concurrent workers send their requests in.
    ``down = True`` makes every request a 500 (the model is down).
    """

    def __init__(self, mix: FaultMix = FaultMix(), *, seed: int = 0, styles: tuple[EchoStyle, ...] = ()) -> None:
        self.mix = mix
        self.seed = seed
        self.styles = (*styles, ENGLISH)
        self.down = False
        self.faults: dict[str, int] = {}
        self._seen: dict[str, int] = {}
        self._lock = threading.Lock()

    def _draw(self, body: dict[str, Any]) -> random.Random:
        digest = hashlib.sha256(json.dumps(body.get("messages", []), sort_keys=True).encode()).hexdigest()
        with self._lock:
            n = self._seen.get(digest, 0)
            self._seen[digest] = n + 1
        return random.Random(f"{self.seed}:{digest}:{n}")

    def _count(self, kind: str) -> None:
        with self._lock:
            self.faults[kind] = self.faults.get(kind, 0) + 1

    def __call__(self, body: dict[str, Any]) -> Reply:
        if self.down:
            self._count("down")
            return server_error(500)
        text = request_text(body)
        mix, rng = self.mix, self._draw(body)
        tokens = model_tokens(text)
        if mix.context_window is not None and tokens > mix.context_window:
            self._count("context_length")
            return context_length_exceeded(tokens, mix.context_window)
        roll = rng.random()
        for kind, rate, reply in (
            ("500", mix.server_error, server_error(500)),
            ("429", mix.rate_limited, rate_limited(mix.retry_after_s)),
            ("empty", mix.empty, empty_answer()),
        ):
            if roll < rate:
                self._count(kind)
                return reply
            roll -= rate
        delay = rng.uniform(*mix.slow_s) if rng.random() < mix.slow else 0.0
        if delay:
            self._count("slow")
        return answer(self.summary(text), delay_s=delay)

    def summary(self, text: str) -> str:
        """The echo: every marker and every cut of ``text`` in the first matching style."""
        from tests.support.markers import find_cut_event_ids, find_markers

        style = next(s for s in self.styles if s.trigger in text)
        cuts = [f'session_load(event_id="{e}")' for e in sorted(find_cut_event_ids(text))]
        out = style.head + style.joiner.join(style.item.format(x) for x in find_markers(text) + cuts) + style.tail
        while style.padding and len(out) < style.length:
            out += style.padding
        return out
