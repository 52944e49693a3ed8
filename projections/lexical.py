"""Lexical recall (pure): tokenizing documents, planning broadened queries, scoring hits.

Cassandra 5.0's SAI has no text analyzers, so documents are tokenized here
and their token set is indexed (``recall_docs.tokens``). The same normalizer
runs over queries. Scoring and broadening follow the Go recall tool: a hit
scores ``matched / len(keywords)`` + 0.75 when the whole normalized query
occurs in the text + 0.15 when at least ``min(2, len(keywords))`` keywords
match; hits under 0.45 are dropped.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

from projections.textcut import head_end

MIN_SCORE = 0.45
MAX_DOC_TOKENS = 1000
MAX_FALLBACKS = 4
CHUNK_CHARS = 8 * 1024
"""At most this many characters per indexed chunk of a document."""
LATER_CHUNK_CHARS = 32 * 1024
"""At most this many characters per chunk after a document's first (``recall_chunks`` rows)."""
LATER_CHUNK_TOKENS = 4000
"""At most this many distinct tokens per chunk after a document's first.

Every chunk repeats the document's common words (a log's field names, a
listing's keys), and each repeat is one more SAI posting to write. Chunks
four times the first one's size hold the same words in a quarter of the rows:
on the benchmark's mix that is ~24 % fewer postings per event than 8 Ki
chunks. A search reads at most ``2 * top_k`` of them (``recall_search``), and a
query still needs its terms within one chunk, which larger chunks only make
likelier. The first chunk stays small: it is what every search reads first."""
CHUNK_OVERLAP = 200
"""Characters each chunk repeats of the one before, so a phrase cut by a chunk end is whole in the next chunk."""

SESSION_TOKEN_PREFIX = "session:"
"""Prefix of the synthetic token naming a row's session (see ``session_token``)."""

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_CJK_CHARS = "\u3040-\u30ff\u3300-\u33ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f"
"""Kana, CJK ideographs, Hangul syllables, and the compatibility forms NFKC turns into them (squared
words, compatibility ideographs, half-width katakana): the chunker reads the text unfolded."""
_CJK = re.compile(f"[{_CJK_CHARS}]")
_CLAUSE_SPLIT = re.compile(r"\s*(?:[,;，；]|\band\b|\bor\b)\s*", re.IGNORECASE)
_LEAD_INS = (
    "summarize the discussion about",
    "summarize the discussion of",
    "what did we say about",
    "what did we decide about",
    "what did the user say about",
    "what did",
    "what was",
    "what were",
    "what is",
    "tell me about",
    "remind me about",
    "do you remember",
    "how did",
    "how do",
)
_STOP_TEXT = (
    "a an the and or but of to in on at by for with from about into over after before is are was were be been "
    "being do does did done have has had i you he she it we they me my your our their this that these those what "
    "which who whom when where why how can could should would will shall may might must not no yes please tell "
    "remind say said discuss discussed discussion summarize summary again there here then than so as if"
)
STOP_WORDS = frozenset(_STOP_TEXT.split())
_SUFFIXES = ("ing", "ed", "es", "s")
_ASCII_SEPARATORS = str.maketrans({chr(c): " " for c in range(128) if not chr(c).isalnum()})


@lru_cache(maxsize=1 << 16)
def stem(token: str) -> str:
    """The index form of a word: one plural or verb suffix removed (the stem keeps at least 3 characters)."""
    for suffix in _SUFFIXES:
        if token.endswith(suffix) and len(token) - len(suffix) >= 3 and not token.isdigit():
            return token[: -len(suffix)]
    return token


_SCRIPT_RUN = re.compile(f"[{_CJK_CHARS}]+|[^{_CJK_CHARS}]+")
"""A word's runs of CJK characters and of everything else (Latin, digits), alternating."""


def fold(text: str) -> str:
    """``text`` as documents and queries are compared: NFKC-normalized (full-width letters and
    digits typed with an IME become their ASCII forms) and lower-cased."""
    if text.isascii():
        return text.lower()
    return unicodedata.normalize("NFKC", text).lower()


def _split_words(text: str) -> list[str]:
    out: list[str] = []
    for word in _WORD.findall(fold(text)):
        if not _CJK.search(word):
            out.append(word)
            continue
        # A word glued to CJK text ("订单号是ORDER12345", "用Python写") is a word of its own; CJK has
        # no spaces: its runs are indexed as character bigrams (a single character for a 1-char run).
        for run in _SCRIPT_RUN.findall(word):
            if not _CJK.match(run) or len(run) == 1:
                out.append(run)
            else:
                out.extend(run[i : i + 2] for i in range(len(run) - 1))
    return out


def _short_keyword(word: str) -> bool:
    """Whether a word under 3 characters is still a keyword (see ``keywords``): it holds a digit or CJK."""
    return any(c.isdigit() for c in word) or bool(_CJK.search(word))


def doc_tokens(text: str, cap: int = MAX_DOC_TOKENS) -> set[str]:
    """The normalized token set stored for a document (at most ``cap`` tokens: the first ones, in text order).

    Only words a query can look up are kept: ``keywords`` drops stop words
    and words under 3 characters (unless they hold a digit or CJK), so those
    are never indexed. Every token is an SAI posting, the dominant write cost
    of the projector (~6 µs of Cassandra CPU each), and in prose these words
    are a fifth to a third of the distinct words of a message. (The one
    difference it makes: a keyword whose *stem* equals a stop word, like
    "thes" → "the", no longer matches documents through that stop word.)

    The indexer runs this on every message, so it takes the fast path when
    the text holds no CJK (one translate and split, then set operations: only
    words with a suffix are stemmed); the result is the same as stemming every
    kept word of ``_split_words``.
    """
    lowered = fold(text)
    if lowered.isascii():  # ASCII: ``_WORD`` matches exactly the runs of [a-z0-9]
        words = lowered.translate(_ASCII_SEPARATORS).split()
    elif _CJK.search(lowered):
        words = _split_words(text)
    else:
        words = _WORD.findall(lowered)
    unique = set(words)
    if len(unique) > cap:  # the cap may bite: keep the first words, in text order
        tokens: set[str] = set()
        for word in dict.fromkeys(words):
            token = _index_token(word)
            if token:
                tokens.add(token)
                if len(tokens) >= cap:
                    break
        return tokens
    # Set operations, not a memo per word: a 50 KB tool result holds thousands of distinct words, and a
    # lookup in a large memo is a cache miss per word (two thirds of the time this took).
    kept = unique - STOP_WORDS
    short = [w for w in kept if len(w) < 3 and not _short_keyword(w)]
    kept.difference_update(short)
    suffixed = [w for w in kept if w.endswith(_SUFFIXES)]
    if suffixed:
        kept.difference_update(suffixed)
        kept.update(map(stem, suffixed))
    return kept


_INDEX_TOKEN: dict[str, str] = {}
"""word -> its index token, ``""`` for words never indexed (a bounded memo: the tokenizer runs on every message)."""
_INDEX_TOKEN_MAX = 1 << 18


def _index_token(word: str) -> str:
    """The token ``word`` is indexed under (its stem), ``""`` when it is not a possible query keyword."""
    token = _INDEX_TOKEN.get(word)
    if token is None:
        if len(_INDEX_TOKEN) >= _INDEX_TOKEN_MAX:
            _INDEX_TOKEN.clear()
        skip = word in STOP_WORDS or (len(word) < 3 and not _short_keyword(word))
        token = _INDEX_TOKEN[word] = "" if skip else stem(word)
    return token


def session_token(session_id: str) -> str:
    """The synthetic index token every recall row of ``session_id`` carries besides its text tokens.

    A session-scoped search adds ``tokens CONTAINS session_token(sid)`` to
    its word terms: SAI then intersects the word's postings with the
    session's (a few per row of that session) instead of stepping over every
    earlier session's matches in the tenant partition. No text yields it:
    text tokens are runs of letters and digits, and this one holds a ``:``.
    """
    return SESSION_TOKEN_PREFIX + session_id


def _span_end(text: str, lowered: str, start: int, max_chars: int, max_tokens: int) -> int:
    """Where the chunk starting at ``start`` ends: before the word that would pass either cap.

    A word is never cut, except a single word longer than ``max_chars``. CJK
    runs are indexed by character bigrams (see ``doc_tokens``), so they may be
    cut between any two characters; a word glued to them is not.
    """
    limit = min(len(text), start + max_chars)
    tokens: set[str] = set()
    for match in _WORD.finditer(lowered, start, limit):
        word = match.group()
        # A word is one run; a word holding CJK is its runs (the CJK ones as pairs, see ``_split_words``).
        if _CJK.search(word):
            runs = [(r.group(), match.start() + r.start()) for r in _SCRIPT_RUN.finditer(word)]
        else:
            runs = [(word, match.start())]
        for part, at in runs:
            if _CJK.match(part):
                for i in range(max(1, len(part) - 1)):
                    token = part[i : i + 2]
                    if token not in tokens:
                        if len(tokens) >= max_tokens:
                            # Never a run's first character alone: the chunk would index it as a
                            # token of its own (a one-character run), one past the cap.
                            return max(at + i if i != 1 else at, start + 1)
                        tokens.add(token)
                continue
            if at + len(part) >= limit and limit < len(text) and at > start:
                return at  # the word runs past the chunk: it goes whole into the next one
            token = _index_token(part)
            if token and token not in tokens:
                if len(tokens) >= max_tokens:
                    return max(at, start + 1)
                tokens.add(token)
    return limit


def _lower_in_place(text: str) -> str:
    """``text`` lower-cased character for character: the same length, so a position in it is the same
    position in ``text`` (whose slices the rows store). A character whose lower case is longer (Turkish
    ``İ`` is two) stays as it is; its tokens are folded later anyway (``doc_tokens``)."""
    lowered = text.lower()
    if len(lowered) == len(text):  # lower() never shortens: every character mapped to one
        return lowered
    return "".join(low if len(low := ch.lower()) == 1 else ch for ch in text)


def chunk_index(
    text: str,
    max_chars: int = CHUNK_CHARS,
    max_tokens: int = MAX_DOC_TOKENS,
    overlap: int = CHUNK_OVERLAP,
    *,
    first_chars: int | None = None,
    first_tokens: int | None = None,
) -> list[tuple[int, int, set[str]]]:
    """``(start, end, tokens)`` chunks that together cover all of ``text``, for indexing it whole.

    Each chunk holds at most ``max_chars`` characters and at most
    ``max_tokens`` distinct index tokens (the first chunk: ``first_chars`` and
    ``first_tokens`` when given), so its token set (returned as ``tokens``)
    never hits a cap: every word of the text is indexed in some chunk. For
    CJK text, where every character pair is a token, the token cap comes
    first (about ``max_tokens`` characters a chunk). Each chunk after the
    first starts ``overlap`` characters before the previous one ended (at a
    word start), so a phrase shorter than that is whole in one chunk.
    """
    if not text:
        return []
    lowered = _lower_in_place(text)
    chunks: list[tuple[int, int, set[str]]] = []
    start = 0
    while True:
        cap_chars, cap_tokens = max_chars, max_tokens
        if not chunks:
            cap_chars, cap_tokens = first_chars or max_chars, first_tokens or max_tokens
        end = min(len(text), start + cap_chars)
        floor = start + cap_chars // 2
        if end < len(text):
            cut = end
            while cut > floor and lowered[cut - 1].isalnum() and lowered[cut].isalnum():
                cut -= 1  # do not cut a word
            end = cut if cut > floor else end
        piece = lowered[start:end]
        # CJK: every character pair is a token, so the cap bites near a thousand characters: go word by word.
        cjk = not piece.isascii() and _CJK.search(piece) is not None
        tokens = set() if cjk else doc_tokens(piece, cap=cap_tokens)
        if cjk or len(tokens) >= cap_tokens:
            end = _span_end(text, lowered, start, cap_chars, cap_tokens)
            tokens = doc_tokens(lowered[start:end], cap=cap_tokens)
        chunks.append((start, end, tokens))
        if end >= len(text):
            return chunks
        # Overlap at most half the chunk, so each chunk moves the start on by at least half its size.
        nxt = max(start + 1, end - min(overlap, (end - start) // 2))
        cut, lowest = nxt, max(start + 1, nxt - overlap)
        while cut > lowest and lowered[cut - 1].isalnum() and lowered[cut].isalnum() and not _CJK.match(lowered[cut]):
            cut -= 1  # back to the start of the word the overlap begins in (CJK: any position is a start)
        if cut > lowest or not (lowered[cut - 1].isalnum() and lowered[cut].isalnum()):
            nxt = cut  # else a word longer than the overlap: cut it rather than step back further
        start = nxt


def normalize_query(query: str) -> str:
    """Folded (see :func:`fold`) with whitespace collapsed."""
    return " ".join(fold(query).split())


def keywords(text: str) -> tuple[str, ...]:
    """Content words of ``text``: stop words removed, words under 3 characters dropped unless they hold a digit."""
    seen: dict[str, None] = {}
    for word in _split_words(text):
        if word in STOP_WORDS:
            continue
        if len(word) < 3 and not _short_keyword(word):
            continue
        seen.setdefault(word, None)
    return tuple(seen)


@dataclass(frozen=True)
class LexicalQuery:
    """One query of a broadening plan: its text (for the substring bonus) and keywords."""

    text: str
    keywords: tuple[str, ...]

    @property
    def index_terms(self) -> tuple[str, ...]:
        """The stemmed terms looked up in the token index (all must occur)."""
        return tuple(dict.fromkeys(stem(k) for k in self.keywords))


def _strip_lead_in(clause: str) -> str:
    for lead in _LEAD_INS:
        if clause.startswith(lead + " "):
            return clause[len(lead) + 1 :]
    return clause


def is_compound(query: str) -> bool:
    """A question with several parts (clauses joined by ``,`` ``;`` ``and`` ``or``)."""
    return len([c for c in _CLAUSE_SPLIT.split(normalize_query(query)) if keywords(c)]) > 1


def plan(query: str) -> list[LexicalQuery]:
    """The broadening plan, strictest first: the whole query, its clauses, its keywords, keyword windows.

    Empty for a blank query. Duplicates (same keyword set) are removed.
    """
    primary = normalize_query(query)
    if not primary:
        return []
    out: list[LexicalQuery] = []
    seen: set[tuple[str, ...]] = set()

    def add(text: str, kws: tuple[str, ...]) -> None:
        if kws and kws not in seen:
            seen.add(kws)
            out.append(LexicalQuery(text, kws))

    all_keywords = keywords(primary)
    add(primary, all_keywords)
    for clause in _CLAUSE_SPLIT.split(primary):
        clause = _strip_lead_in(clause.strip())
        add(clause, keywords(clause))
    fallbacks: list[tuple[str, ...]] = []
    if len(all_keywords) > 8:
        fallbacks.append(all_keywords[:4] + all_keywords[-4:])
    size = 4 if len(all_keywords) >= 5 else 3
    if len(all_keywords) > size:
        for i in range(len(all_keywords) - size + 1):
            fallbacks.append(all_keywords[i : i + size])
    for kws in fallbacks[:MAX_FALLBACKS]:
        add(" ".join(kws), kws)
    return out


class ScoredText:
    """A document prepared once for scoring against every query of a plan.

    The token set is built only when a keyword is not a plain substring of
    the text (tokenizing 8 Ki characters is the costly part of scoring, and
    the documents a search fetches usually hold every keyword verbatim). The
    whole-query bonus is looked up in the lowered text with a pattern (the
    query's words joined by runs of whitespace), which finds exactly what a
    search of the whitespace-collapsed text finds without building that copy
    of every document (a third of a search's Python time).
    """

    __slots__ = ("_tokens", "lowered")

    def __init__(self, text: str) -> None:
        self.lowered = fold(text)
        self._tokens: set[str] | None = None

    @property
    def tokens(self) -> set[str]:
        if self._tokens is None:
            self._tokens = doc_tokens(self.lowered) if len(self.lowered) < 200_000 else set()
        return self._tokens

    def holds_keyword(self, keyword: str) -> bool:
        """Whether ``keyword`` occurs verbatim or as an index token (its stem) of the text.

        A token is a word's stem, a prefix of the word, so a stem that is not
        even a substring of the text is no token of it: the token set is built
        only for a stem that is (a keyword absent from a document is the usual
        case of a broadened query, and building the set was most of scoring).
        """
        if keyword in self.lowered:
            return True
        root = stem(keyword)
        return root in self.lowered and root in self.tokens

    def holds_phrase(self, phrase: str) -> bool:
        """Whether ``phrase`` (normalized: single spaces) occurs in the text with its whitespace collapsed."""
        if phrase in self.lowered:
            return True
        return " " in phrase and _phrase_pattern(phrase).search(self.lowered) is not None


@lru_cache(maxsize=1024)
def _phrase_pattern(phrase: str) -> re.Pattern[str]:
    # ``\s`` matches what ``str.split()`` splits on (both use the Unicode whitespace test).
    return re.compile(r"\s+".join(re.escape(word) for word in phrase.split(" ")))


def score(query: LexicalQuery, text: str | ScoredText) -> float:
    """The Go lexical score of ``text`` for ``query`` (0 when no keyword matches)."""
    if not query.keywords:
        return 0.0
    doc = text if isinstance(text, ScoredText) else ScoredText(text)
    matched = sum(1 for k in query.keywords if doc.holds_keyword(k))
    if matched == 0:
        return 0.0
    value = matched / len(query.keywords)
    if query.text and doc.holds_phrase(query.text):
        value += 0.75
    if matched >= min(2, len(query.keywords)):
        value += 0.15
    return value


LINE_CHARS = 96
"""Characters of one line of a hit's context window (``context_line``)."""


def context_line(text: str) -> str:
    """A document as one line of a search hit's context window (see ``recall_lines``)."""
    return compact(text, LINE_CHARS)


def compact(text: str, limit: int = 280) -> str:
    """``text`` on one line, at most ``limit`` characters (``...`` marks a cut); ``<empty>`` when blank.

    Flattens a prefix first: the flattened prefix of a text is a prefix of the flattened
    text, so when it already runs past ``limit`` the cut is the same (a hit's document
    may be a 50 KB tool result; its snippet needs the first few hundred characters). The
    cut falls on a character boundary (:mod:`projections.textcut`: never inside an emoji
    sequence, after a base before its combining marks, inside a flag or jamo syllable);
    the prefix ends at least 64 characters past it, farther than a cut moves back.
    """
    head = text[: 4 * limit + 64]
    flat = " ".join(head.split())
    if len(flat) <= limit and len(head) < len(text):
        flat = " ".join(text.split())
    if not flat:
        return "<empty>"
    return flat if len(flat) <= limit else flat[: head_end(flat, max(limit - 3, 0))] + "..."
