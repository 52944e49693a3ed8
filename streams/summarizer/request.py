"""The chat-completions request a summary pass sends, and how it is counted.

A request is kept as plain OpenAI-shaped dicts so a caller's own request
(cache-safe forking) round-trips unchanged; callbacks may edit it in place.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from schemas import Message
from streams.rules.tokens import TokenCounter


@dataclass(frozen=True)
class SummarySource:
    """What a request summarizes, in structured form.

    Sent to no provider: the embedded extractive model reads it instead of
    parsing the prompt.
    """

    conversation_text: str
    previous_summary: str = ""
    max_summary_words: int | None = None
    max_summary_length: int | None = None
    """The character cap the prompt states; the extractive model fits its selection under it."""


@dataclass
class ChatRequest:
    """``messages`` and ``tools`` in the OpenAI shape, plus generation ``params``."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    source: SummarySource | None = None

    def clone(self) -> ChatRequest:
        """A deep copy: edits to the clone never reach this request."""
        return ChatRequest(
            messages=copy.deepcopy(self.messages),
            tools=copy.deepcopy(self.tools),
            params=copy.deepcopy(self.params),
            source=self.source,
        )

    def to_openai(self) -> dict[str, Any]:
        """Keyword arguments for ``chat.completions.create`` (model excluded)."""
        out: dict[str, Any] = dict(self.params)
        out["messages"] = self.messages
        if self.tools:
            out["tools"] = self.tools
        return out


def standalone_request(user_prompt: str, system_prompt: str = "", **kw: Any) -> ChatRequest:
    """``[system?, user]``; the system message only when it has text."""
    messages: list[dict[str, Any]] = []
    if system_prompt.strip():
        messages.append({"role": "system", "content": system_prompt})
    messages.append({"role": "user", "content": user_prompt})
    return ChatRequest(messages=messages, params={"stream": False}, **kw)


_ROLE_ALIASES = {"developer": "system", "function": "tool"}


def as_message(raw: Mapping[str, Any]) -> Message:
    """A request message as a :class:`Message`, for counting.

    Roles the event schema does not know are mapped (``developer`` counts as
    ``system``); list-of-parts content keeps its text parts.
    """
    data = dict(raw)
    data["role"] = _ROLE_ALIASES.get(str(data.get("role")), data.get("role"))
    if data["role"] not in ("user", "assistant", "tool", "system"):
        data["role"] = "user"
    content = data.get("content")
    if content is not None and not isinstance(content, str | list):
        data["content"] = json.dumps(content, ensure_ascii=False)
    return Message.model_validate(data)


def count_tool(tool: Mapping[str, Any], counter: TokenCounter) -> int:
    """A tool schema counts as its JSON declaration wrapped in a system message."""
    text = json.dumps(tool, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return counter.count_message(Message(role="system", content=text))


def _tool_name(tool: Mapping[str, Any]) -> str:
    function = tool.get("function")
    if isinstance(function, Mapping):
        return str(function.get("name", ""))
    return str(tool.get("name", ""))


def count_request(request: ChatRequest, counter: TokenCounter) -> int:
    """Estimated prompt tokens of the exact request: messages, then tools by name."""
    total = sum(counter.count_message(as_message(m)) for m in request.messages)
    tools: Iterable[Mapping[str, Any]] = sorted(request.tools, key=_tool_name)
    return total + sum(count_tool(t, counter) for t in tools)


_PLAIN_KEYS = frozenset(("role", "content"))


def _byte_bound(request: ChatRequest) -> int | None:
    """An upper bound of the request's count by a counter ``at_most_a_token_per_byte``, or ``None`` when
    not one of plain text messages.

    A BPE token holds at least one byte of its text, so a text counts at most its UTF-8
    bytes (and a message at least 1). Only for messages of a role and a string content
    (what the summarizer builds): other shapes count through ``as_message``.
    """
    if request.tools:
        return None
    bound = 0
    for message in request.messages:
        content = message.get("content")
        if not isinstance(content, str) or not message.keys() <= _PLAIN_KEYS:
            return None
        try:
            bound += len(content.encode()) + 1
        except UnicodeEncodeError:  # a lone surrogate: the count itself decides what happens to it
            return None
    return bound


def fits_budget(request: ChatRequest, counter: TokenCounter, budget: int) -> bool:
    """``count_request(request, counter) <= budget``, not counted when a bound already answers it.

    Exact BPE counts (tiktoken) cost ~100 µs per kilobyte of request, and a summary
    request is built and checked against its budget for every job (its cache key
    included): one far within its budget is known to fit from its bytes alone.
    """
    if getattr(counter, "at_most_a_token_per_byte", False):
        bound = _byte_bound(request)
        if bound is not None and bound <= budget:
            return True
    return count_request(request, counter) <= budget
