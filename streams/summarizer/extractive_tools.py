"""Tool traffic for the extractive summarizer: compact outcome lines and recall detection.

Everything here only reorders and clips text that is already in the
conversation (JSON keys, values, the tool name); nothing is made up.
"""

from __future__ import annotations

import json
import re
from typing import Any

RECALL_TOOLS = frozenset({"session_search", "session_load"})
"""Tools whose answers are copies of old history: never carried into a summary."""

ARG_WORDS = 8
RESULT_WORDS = 18
VALUE_WORDS = 6
ELLIPSIS = "…"

_HISTORICAL = re.compile(r'"historical_context"\s*:\s*true')
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+|\n+")


# Chinese and Japanese write without spaces between words: each of their characters counts as a word (as
# word processors count them), so a limit in words bounds their text as it bounds English. Korean puts
# spaces between its words, so its syllables are not counted one by one.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_WORD = re.compile(f"[{_CJK}]|[^\\s{_CJK}]+")


def word_count(text: str) -> int:
    """Words in ``text``: whitespace-separated runs, each Chinese or Japanese character counted as one word."""
    return len(_WORD.findall(text))


def clip_words(text: str, limit: int) -> str:
    """The first ``limit`` words (see :func:`word_count`), whitespace collapsed, with ``…`` when some were cut."""
    end = None
    for n, match in enumerate(_WORD.finditer(text), 1):
        if n > limit:
            end = match.start()
            break
    if end is None:
        return " ".join(text.split())
    return " ".join(text[:end].split()) + ELLIPSIS


def _parse_json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _has_historical_flag(value: Any) -> bool:
    if isinstance(value, dict):
        if value.get("historical_context") is True:
            return True
        return any(_has_historical_flag(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_historical_flag(v) for v in value)
    return False


def is_recall_result(name: str, content: str) -> bool:
    """A recall tool's answer, or any result marked ``"historical_context": true``."""
    if name.strip() in RECALL_TOOLS:
        return True
    if _HISTORICAL.search(content):
        return True
    return _has_historical_flag(_parse_json(content.strip()))


def is_recall_call(name: str) -> bool:
    """A call of a recall tool (``session_search``, ``session_load``)."""
    return name.strip() in RECALL_TOOLS


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return clip_words(str(value), VALUE_WORDS)


def _render(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={_render(v)}" for k, v in value.items())
    if isinstance(value, list):
        if any(isinstance(v, dict | list) for v in value):
            return "[" + "; ".join(_render(v) for v in value) + "]"
        return ",".join(_scalar(v) for v in value)
    return _scalar(value)


def compact_args(args: str) -> str:
    """A call's arguments as ``key=value`` pairs, clipped to a few words."""
    parsed = _parse_json(args.strip())
    text = _render(parsed) if isinstance(parsed, dict | list) else args.strip()
    return clip_words(text, ARG_WORDS)


def compact_result(content: str) -> str:
    """A result as ``key=value`` pairs (JSON) or its first sentences, clipped to a few words."""
    stripped = content.strip()
    parsed = _parse_json(stripped)
    if isinstance(parsed, dict | list):
        return clip_words(_render(parsed), RESULT_WORDS)
    first = [s for s in _SENTENCE_SPLIT.split(stripped) if s.strip()][:2]
    return clip_words(" ".join(first), RESULT_WORDS)


def outcome_line(name: str, args: str | None, result: str | None) -> str:
    """``name(args) → result``; ``called name(args)`` without a result; ``name → result`` without a call."""
    call = f"{name}({compact_args(args)})" if args is not None and args.strip() else name
    if result is None:
        return f"called {call}"
    return f"{call} → {compact_result(result)}"
