"""The embedded default: a deterministic extractive summarizer, no network, no key.

It picks the sentences that carry what a continuation needs (the user's
goals, decisions, constraints, numbers and identifiers, tool outcomes, open
tasks), rolls the previous summary forward, and never exceeds the word limit.
It writes nothing new, so it cannot invent facts; it is recorded under its
own model name so nobody mistakes it for an LLM.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from streams.summarizer.model import ModelResponse, ModelUsage
from streams.summarizer.request import ChatRequest, SummarySource

EXTRACTIVE_MODEL_NAME = "distill-extractive-1"
DEFAULT_WORD_LIMIT = 200
MAX_ITEM_WORDS = 40

_SENTENCE_SPLIT = re.compile(r"(?<=[.!?。！？])\s+|\n+")
_LINE = re.compile(r"^(?P<author>[^:\n]{1,64}):\s?(?P<content>.*)$")
_TOOL_CALL = re.compile(r"^\[Called tool: (?P<name>[^\]]+?)(?: with args: (?P<args>.*))?\]$", re.S)
_TOOL_RESULT = re.compile(r"^\[(?P<name>[^\]]+?) returned: (?P<content>.*)\]$", re.S)
_IDENTIFIER = re.compile(r"\d|`|[A-Za-z0-9]+[_/.#@-][A-Za-z0-9]|[a-z][A-Z]|https?://")

_CUES: tuple[tuple[int, tuple[str, ...]], ...] = (
    (3, ("decid", "agreed", "we will", "i will", "we'll", "i'll", "chose", "going with", "settled")),
    (3, ("must", "should", "never", "always", "only", "don't", "do not", "without", "at most", "at least")),
    (3, ("deadline", "budget", "limit", "require", "constraint", "prefer")),
    (3, ("error", "failed", "fail", "timeout", "timed out", "truncated", "denied", "not found", "exception")),
    (2, ("todo", "next", "need to", "pending", "remaining", "later", "follow up", "open question", "plan")),
    (2, ("want", "goal", "trying to", "please", "help me", "i need", "we need")),
)
_FILLER = (
    "sure",
    "of course",
    "happy to help",
    "you're welcome",
    "thanks",
    "thank you",
    "ok",
    "okay",
    "hi",
    "hello",
    "there",
)
_PUNCTUATION = re.compile(r"[^\w\s']+")


@dataclass(frozen=True)
class _Item:
    text: str
    score: int
    order: int


def _clip_words(text: str, limit: int) -> str:
    words = text.split()
    if len(words) <= limit:
        return " ".join(words)
    return " ".join(words[:limit]) + "…"


def _score(author: str, sentence: str, is_tool: bool) -> int:
    lower = sentence.lower()
    score = 3 if author == "user" else 1
    score += sum(weight for weight, cues in _CUES if any(c in lower for c in cues))
    if _IDENTIFIER.search(sentence):
        score += 2
    if is_tool:
        score += 2
    if "?" in sentence and author == "user":
        score += 1
    short = len(sentence.split()) < 3 and not _IDENTIFIER.search(sentence)
    if short or _is_filler(lower):
        score -= 3
    return score


def _is_filler(lower: str) -> bool:
    rest = f" {_PUNCTUATION.sub(' ', lower)} "
    for phrase in _FILLER:
        rest = rest.replace(f" {phrase} ", " ")
    return not rest.strip()


def _conversation_items(conversation: str, start: int) -> list[_Item]:
    items: list[_Item] = []
    for line in conversation.splitlines():
        m = _LINE.match(line.strip())
        if not m:
            continue
        author, content = m.group("author").strip(), m.group("content").strip()
        call = _TOOL_CALL.match(content)
        result = _TOOL_RESULT.match(content)
        if call:
            args = _clip_words(call.group("args") or "", 12)
            sentences = [f"called {call.group('name')}" + (f" with {args}" if args else "")]
        elif result:
            first = _SENTENCE_SPLIT.split(result.group("content").strip())[:2]
            sentences = [f"{result.group('name')} returned: {' '.join(first)}"]
        else:
            sentences = [s for s in _SENTENCE_SPLIT.split(content) if s.strip()]
        for sentence in sentences:
            text = f"{author}: {_clip_words(sentence, MAX_ITEM_WORDS)}"
            items.append(_Item(text, _score(author, sentence, bool(call or result)), start + len(items)))
    return items


def _previous_items(previous: str) -> list[_Item]:
    # Earlier summaries keep a bonus: dropping them would forget old facts first.
    return [
        _Item(_clip_words(line.strip(), MAX_ITEM_WORDS), 4, i)
        for i, line in enumerate(x for x in previous.splitlines() if x.strip())
    ]


def _dedupe(items: Iterable[_Item]) -> list[_Item]:
    seen: set[str] = set()
    out = []
    for item in items:
        key = item.text.lower()
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out


def summarize_extractive(conversation: str, previous_summary: str = "", max_words: int | None = None) -> str:
    """The extractive summary: one selected line per kept sentence, in conversation order.

    The result never has more than ``max_words`` words (default 200).
    """
    limit = max_words if max_words and max_words > 0 else DEFAULT_WORD_LIMIT
    previous = _previous_items(previous_summary)
    candidates = _conversation_items(conversation, len(previous))
    fresh = [it for it in candidates if it.score > 0] or ([] if previous else candidates)
    items = _dedupe(previous + fresh)
    ranked = sorted(items, key=lambda it: (-it.score, -it.order))
    chosen: list[_Item] = []
    used = 0
    for item in ranked:
        words = len(item.text.split())
        if used + words <= limit:
            chosen.append(item)
            used += words
        elif not chosen:
            chosen.append(_Item(_clip_words(item.text, limit), item.score, item.order))
            used = limit
    return "\n".join(it.text for it in sorted(chosen, key=lambda it: it.order))


def _source_from_messages(request: ChatRequest) -> SummarySource:
    """A forked request carries no source: read the conversation from its messages."""
    lines = []
    for message in request.messages[:-1]:
        role = str(message.get("role", ""))
        if role in ("system", "developer"):
            continue
        content = message.get("content")
        if isinstance(content, str) and content.strip():
            label = "user" if role == "user" else str(message.get("name") or role)
            lines.append(f"{label}: {content.strip()}")
    return SummarySource("\n".join(lines))


class ExtractiveModel:
    """The extractive summarizer behind the :class:`~streams.summarizer.model.SummaryModel` interface."""

    name = EXTRACTIVE_MODEL_NAME
    context_window: int | None = 1_048_576
    provider_budget: int | None = None

    def __init__(self, default_word_limit: int = DEFAULT_WORD_LIMIT) -> None:
        self.default_word_limit = default_word_limit

    async def complete(self, request: ChatRequest) -> ModelResponse:
        source = request.source or _source_from_messages(request)
        text = summarize_extractive(
            source.conversation_text,
            source.previous_summary,
            source.max_summary_words or self.default_word_limit,
        )
        return ModelResponse(text=text, model=self.name, usage=ModelUsage(completion_tokens=None))
