"""The embedded default: a deterministic extractive summarizer, no network, no key.

It picks the sentences that carry what a continuation needs (the user's
goals, decisions, constraints, numbers and identifiers, tool outcomes, open
tasks), rolls the previous summary forward, and never exceeds the word limit.
It writes nothing new, so it cannot invent facts; it is recorded under its
own model name so nobody mistakes it for an LLM.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass

from streams.summarizer.extractive_tools import (
    clip_words,
    is_recall_call,
    is_recall_result,
    outcome_line,
    word_count,
)
from streams.summarizer.length import cap_length
from streams.summarizer.model import ModelResponse, ModelUsage
from streams.summarizer.request import ChatRequest, SummarySource

EXTRACTIVE_MODEL_NAME = "distill-extractive-1"
DEFAULT_WORD_LIMIT = 200
MAX_ITEM_WORDS = 40
MIN_SCORE = 2
"""Fresh sentences below this score (chatter without cues or identifiers) are left out."""
PREVIOUS_BONUS = 2
"""Earlier summaries keep a bonus: dropping them would forget old facts first."""
CONCLUSION_BONUS = 2
NEAR_DUPLICATE = 0.8
PREVIOUS_SHARE = 0.6
"""The previous summary's most important lines take at most this share of the limit before new ones."""
RESTATED_PENALTY = 4
"""A tool outcome whose numbers a later agent line repeats is already told there."""

# CJK text puts no space after its full stops.
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])\s*|\n+")
_CJK_STOPS = ("。", "！", "？")
_LINE = re.compile(r"^(?P<author>[^:\n]{1,64}):\s?(?P<content>.*)$")
_TOOL_CALL = re.compile(r"^\[Called tool: (?P<name>[^\]]+?)(?: with args: (?P<args>.*))?\]$", re.S)
_TOOL_RESULT = re.compile(r"^\[(?P<name>[^\]]+?) returned: (?P<content>.*)\]$", re.S)
_TOOL_OPEN = re.compile(r"^\[(?:Called tool: |[^\]\n]+? returned: )")
# Lines of an earlier summary: this version's outcome lines and the older ``called``/``returned:`` lines.
_OUTCOME = re.compile(r"^(?:called )?(?P<name>[\w.-]+)(?:\(.*\))?(?: → .*)?$", re.S)
_OLD_CALL = re.compile(r"^called (?P<name>[\w.-]+) with (?P<args>.*)$", re.S)
_OLD_RESULT = re.compile(r"^(?P<name>[\w.-]+) returned: (?P<content>.*)$", re.S)
_IDENTIFIER = re.compile(r"\d|`|[A-Za-z0-9]+[_/.#@-][A-Za-z0-9]|[a-z][A-Z]|https?://")
_NARRATION = re.compile(
    r"^(?:(?:great|ok|okay|sure|alright|perfect)\b[,!.]?\s*)?"
    r"(?:let me|let's see|i'm going to|one moment|anything else"
    r"|i'll (?:ask|check|look|search|get|find|start)\b|[a-z]+ing\b[^.:]*(?:first|now|\.\s*$))",
    re.I,
)
_TOKEN = re.compile(r"\w+")

_CUES: tuple[tuple[int, tuple[str, ...]], ...] = (
    (3, ("decid", "agreed", "we will", "i will", "we'll", "i'll", "chose", "going with", "settled", "let's")),
    (3, ("must", "should", "never", "always", "only", "don't", "do not", "without", "at most", "at least", "can't")),
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
    author: str
    body: str
    score: int
    order: int
    group: int
    """Sentences of one source line share a group and are printed on one line again."""

    @property
    def text(self) -> str:
        return f"{self.author}: {self.body}" if self.author else self.body

    @property
    def words(self) -> int:
        return word_count(self.text)


@dataclass(frozen=True)
class _Entry:
    author: str
    body: str
    is_tool: bool


def _score(author: str, sentence: str, is_tool: bool) -> int:
    lower = sentence.lower()
    score = 3 if author == "user" else 1
    score += sum(weight for weight, cues in _CUES if any(c in lower for c in cues))
    if _IDENTIFIER.search(sentence):
        score += 2
    if is_tool and "→" in sentence:
        score += 2
    if "?" in sentence and author == "user":
        score += 1
    short = word_count(sentence) < 3 and not _IDENTIFIER.search(sentence)
    if short or _is_filler(lower):
        score -= 3
    if author != "user" and not is_tool and _NARRATION.match(sentence.strip()):
        score -= 3
    return score


def _is_filler(lower: str) -> bool:
    rest = f" {_PUNCTUATION.sub(' ', lower)} "
    for phrase in _FILLER:
        rest = rest.replace(f" {phrase} ", " ")
    return not rest.strip()


def _lines(conversation: str) -> list[tuple[str, str]]:
    """``(author, content)`` pairs; a bracketed tool line keeps its continuation lines."""
    out: list[tuple[str, str]] = []
    open_tool = False
    for raw in conversation.splitlines():
        line = raw.strip()
        if open_tool:
            author, content = out[-1]
            out[-1] = (author, f"{content}\n{line}")
            open_tool = not line.endswith("]")
            continue
        m = _LINE.match(line)
        if not m:
            continue
        author, content = m.group("author").strip(), m.group("content").strip()
        out.append((author, content))
        open_tool = _TOOL_OPEN.match(content) is not None and not content.endswith("]")
    return out


def _entries(conversation: str) -> list[_Entry]:
    """The conversation's lines; each tool call folded into its result, recall traffic left out."""
    parsed: list[tuple[str, str, str, str | None]] = []  # (author, kind, name or text, args/content)
    for author, content in _lines(conversation):
        if call := _TOOL_CALL.match(content):
            parsed.append((author, "call", call.group("name").strip(), call.group("args") or ""))
        elif result := _TOOL_RESULT.match(content):
            parsed.append((author, "result", result.group("name").strip(), result.group("content")))
        else:
            parsed.append((author, "text", content, None))
    pending: dict[str, deque[int]] = {}
    paired: dict[int, int] = {}  # result index -> call index
    for i, (_, kind, name, _) in enumerate(parsed):
        if kind == "call":
            pending.setdefault(name, deque()).append(i)
        elif kind == "result" and pending.get(name):
            paired[i] = pending[name].popleft()
    dropped = set(paired.values())
    for i, (_, kind, name, payload) in enumerate(parsed):
        recall_call = kind == "call" and is_recall_call(name)
        if recall_call or (kind == "result" and is_recall_result(name, payload or "")):
            dropped.add(i)
    entries: list[_Entry] = []
    for i, (author, kind, name, payload) in enumerate(parsed):
        if i in dropped:
            continue
        if kind == "text":
            entries.append(_Entry(author, name, False))
        elif kind == "call":
            entries.append(_Entry(author, outcome_line(name, payload, None), True))
        else:
            args = parsed[paired[i]][3] if i in paired else None
            entries.append(_Entry(author, outcome_line(name, args, payload or ""), True))
    return entries


def _sentences(body: str) -> list[str]:
    return [clip_words(s, MAX_ITEM_WORDS) for s in _SENTENCE_SPLIT.split(body) if s.strip()]


def _conclusions(entries: list[_Entry]) -> set[int]:
    """The last non-question text line of each stretch of non-user lines: the agent's conclusion."""
    out: set[int] = set()
    last: int | None = None
    for i, entry in enumerate(entries):
        if entry.author == "user":
            if last is not None:
                out.add(last)
            last = None
        elif not entry.is_tool and not entry.body.rstrip().endswith("?"):
            last = i
    if last is not None:
        out.add(last)
    return out


def _numbers(text: str) -> set[str]:
    return {t.lower() for t in _TOKEN.findall(text) if any(c.isdigit() for c in t)}


def _restated(entries: list[_Entry]) -> set[int]:
    """Tool outcomes whose result numbers a later text line mostly repeats."""
    out: set[int] = set()
    later: set[str] = set()
    for i in range(len(entries) - 1, -1, -1):
        entry = entries[i]
        if not entry.is_tool:
            later |= _numbers(entry.body)
            continue
        result = _numbers(entry.body.partition(" → ")[2])
        if len(result) >= 2 and len(result & later) * 2 >= len(result):
            out.add(i)
    return out


def _items(entries: list[_Entry], start: int, group_start: int, bonus: int) -> list[_Item]:
    items: list[_Item] = []
    conclusions = _conclusions(entries)
    restated = _restated(entries)
    for g, entry in enumerate(entries):
        sentences = [clip_words(entry.body, MAX_ITEM_WORDS)] if entry.is_tool else _sentences(entry.body)
        for sentence in sentences:
            score = _score(entry.author, sentence, entry.is_tool) + bonus
            if g in restated:
                score -= RESTATED_PENALTY
            if g in conclusions and score - bonus >= 2:
                score += CONCLUSION_BONUS
            items.append(_Item(entry.author, sentence, score, start + len(items), group_start + g))
    return items


def _previous_entries(previous: str) -> list[_Entry]:
    """An earlier summary's lines, older tool lines compacted, recall traffic dropped."""
    entries: list[_Entry] = []
    for raw in previous.splitlines():
        line = raw.strip()
        if not line:
            continue
        m = _LINE.match(line)
        author, body = (m.group("author").strip(), m.group("content").strip()) if m else ("", line)
        if old := _OLD_RESULT.match(body):
            if is_recall_result(old.group("name"), old.group("content")):
                continue
            entries.append(_Entry(author, outcome_line(old.group("name"), None, old.group("content")), True))
        elif old := _OLD_CALL.match(body):
            if is_recall_call(old.group("name")):
                continue
            entries.append(_Entry(author, outcome_line(old.group("name"), old.group("args"), None), True))
        elif (tool := _OUTCOME.match(body)) and ("→" in body or body.startswith("called ")):
            if is_recall_call(tool.group("name")) or is_recall_result(tool.group("name"), body):
                continue
            entries.append(_Entry(author, body, True))
        else:
            entries.append(_Entry(author, body, False))
    return entries


def _tokens(item: _Item) -> frozenset[str]:
    return frozenset(t.lower() for t in _TOKEN.findall(item.body))


def _near_duplicate(tokens: frozenset[str], kept: list[frozenset[str]]) -> bool:
    for other in kept:
        if not tokens or tokens <= other:
            return True
        if len(tokens & other) / len(tokens | other) >= NEAR_DUPLICATE:
            return True
    return False


def _render(chosen: list[_Item]) -> str:
    lines: list[str] = []
    last_group: int | None = None
    for item in sorted(chosen, key=lambda it: it.order):
        if item.group == last_group and lines:
            space = "" if lines[-1].endswith(_CJK_STOPS) else " "  # CJK writes no space after a full stop
            lines[-1] = f"{lines[-1]}{space}{item.body}"
        else:
            lines.append(item.text)
        last_group = item.group
    return "\n".join(lines)


def summarize_extractive(
    conversation: str, previous_summary: str = "", max_words: int | None = None, max_chars: int | None = None
) -> str:
    """The extractive summary: the previous summary's kept lines, then the new ones, in order.

    Tool calls are folded into their results (``name(args) → result``), recall
    traffic (``session_search``, ``session_load``, ``"historical_context": true``)
    is left out, near-identical sentences are kept once, and the result never
    has more than ``max_words`` words (default 200; each Chinese or Japanese character is a word)
    nor, when given, more than ``max_chars`` characters (``max_summary_length``:
    sentences are left out to fit rather than the text cut afterwards).
    """
    limit = max_words if max_words and max_words > 0 else DEFAULT_WORD_LIMIT
    previous_entries = _previous_entries(previous_summary)
    previous = _items(previous_entries, 0, 0, PREVIOUS_BONUS)
    candidates = _items(_entries(conversation), len(previous), len(previous_entries), 0)
    fresh = [it for it in candidates if it.score >= MIN_SCORE] or ([] if previous else candidates)
    chosen: list[_Item] = []
    kept: list[frozenset[str]] = []
    used = 0

    def fits(item: _Item) -> bool:
        return not max_chars or len(_render([*chosen, item])) <= max_chars

    def take(items: list[_Item], budget: int) -> None:
        nonlocal used
        for item in sorted(items, key=lambda it: (-it.score, it.order)):
            if item in chosen:
                continue
            tokens = _tokens(item)
            if kept and _near_duplicate(tokens, kept):
                continue
            if used + item.words <= budget and fits(item):
                chosen.append(item)
                kept.append(tokens)
                used += item.words
            elif not chosen and budget == limit:
                text = clip_words(item.text, limit)
                if max_chars:
                    text = cap_length(text, max_chars)
                chosen.append(_Item("", text, item.score, item.order, item.group))
                kept.append(tokens)
                used = limit

    if fresh:
        take(previous, int(limit * PREVIOUS_SHARE))
    take(fresh, limit)
    take(previous, limit)
    return _render(chosen)


def _source_from_messages(request: ChatRequest) -> SummarySource:
    """A request without a source: read the conversation from its messages, system ones left out.

    The summarizer gives its forked requests a source (the previous summary included); this
    reads one built elsewhere, whose system messages are the agent's instructions.
    """
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
            source.max_summary_length,
        )
        return ModelResponse(text=text, model=self.name, usage=ModelUsage(completion_tokens=None))
