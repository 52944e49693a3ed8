"""Search snippets (pure): the part of a hit's text around the matched terms, cut on character boundaries.

A hit may be a chunk of 32 Ki characters of a tool result whose matching fact
sits deep inside; its first characters say nothing about why it matched. The
snippet is the window of the text holding the most distinct keywords of the
query (found the way :mod:`projections.lexical` matches them: NFKC-folded,
lower-cased, CJK as bigrams, stems), widened evenly around them, its ends on
character boundaries (:mod:`projections.textcut`) and, in words of Latin
script, on spaces; whitespace is collapsed and ``...`` marks each cut end.
"""

from __future__ import annotations

from projections.lexical import fold, keywords, stem
from projections.textcut import head_end, tail_start

ELLIPSIS = "..."
MAX_OCCURRENCES = 64
"""Occurrences of one keyword looked at (the first ones): a common word repeats thousands of times in a log."""
_WORD_SNAP = 16
"""How far an end moves to fall between two words rather than inside one."""


def _folded(text: str) -> tuple[str, list[int] | None]:
    """``fold(text)`` and, when folding changed the length, the index in ``text`` of each folded character."""
    folded = fold(text)
    if len(folded) == len(text):
        return folded, None
    pieces: list[str] = []
    origin: list[int] = []
    for i, ch in enumerate(text):
        f = fold(ch)
        pieces.append(f)
        origin.extend([i] * len(f))
    return "".join(pieces), origin


def _occurrences(folded: str, terms: tuple[str, ...]) -> list[tuple[int, int, int]]:
    """``(start, end, term index)`` of the first occurrences of each term (or its stem), by position."""
    out: list[tuple[int, int, int]] = []
    for n, term in enumerate(terms):
        for needle in dict.fromkeys((term, stem(term))):
            found = 0
            at = folded.find(needle)
            while at >= 0 and found < MAX_OCCURRENCES:
                out.append((at, at + len(needle), n))
                found += 1
                at = folded.find(needle, at + 1)
            if found:
                break
    return sorted(out)


def _best_cluster(occ: list[tuple[int, int, int]], span: int) -> tuple[int, int] | None:
    """The earliest ``[start, end)`` within ``span`` characters holding the most distinct terms."""
    best: tuple[int, int, int] | None = None  # (-distinct, start, end)
    counts: dict[int, int] = {}
    j = 0
    for i, (start, _, _) in enumerate(occ):
        while j < len(occ) and occ[j][1] - start <= span:
            counts[occ[j][2]] = counts.get(occ[j][2], 0) + 1
            j += 1
        if j > i:
            end = max(e for _, e, _ in occ[i:j])
            candidate = (-len(counts), start, end)
            if best is None or candidate < best:
                best = candidate
            term = occ[i][2]
            counts[term] -= 1
            if not counts[term]:
                del counts[term]
        else:
            j = i + 1
    return None if best is None else (best[1], best[2])


def _latin(ch: str) -> bool:
    return ch.isalnum() and ch.isascii()


def _snap_words(text: str, start: int, end: int, keep: tuple[int, int]) -> tuple[int, int]:
    """Ends moved off the middle of a Latin word (a few characters at most, never into ``keep``)."""
    if 0 < start < len(text) and _latin(text[start - 1]) and _latin(text[start]):
        space = text.find(" ", start, min(start + _WORD_SNAP, keep[0]))
        start = space + 1 if space >= 0 else start
    if 0 < end < len(text) and _latin(text[end - 1]) and _latin(text[end]):
        space = text.rfind(" ", max(end - _WORD_SNAP, keep[1]), end)
        end = space if space >= 0 else end
    return start, end


def excerpt(text: str, query: str, limit: int) -> str:
    """At most ``limit`` characters of ``text`` on one line, around the query's keywords (else its start).

    ``<empty>`` for a blank text. ``...`` marks a cut end (it counts toward ``limit``).
    """
    flat_all = " ".join(text.split()) if len(text) <= 4 * limit else None
    if flat_all is not None and len(flat_all) <= limit:
        return flat_all or "<empty>"
    span = max(1, limit - 2 * len(ELLIPSIS))
    folded, origin = _folded(text)
    cluster = _best_cluster(_occurrences(folded, keywords(query)), span)
    lo, hi = (0, 0) if cluster is None else cluster
    if origin is not None and cluster is not None:
        lo, hi = origin[lo], origin[hi - 1] + 1
    pad = max(0, span - (hi - lo)) // 2
    start = max(0, lo - pad)
    end = min(len(text), start + span)
    start = max(0, end - span)
    start, end = tail_start(text, start), head_end(text, end)
    start, end = _snap_words(text, start, end, (lo, hi))
    body = " ".join(text[start:end].split())
    head = ELLIPSIS if text[:start].strip() else ""
    tail = ELLIPSIS if text[end:].strip() else ""
    if not body:
        return "<empty>" if not (head or tail) else ELLIPSIS
    return f"{head}{body}{tail}"


def context_window(before: list[str], match: str, after: list[str], limit: int) -> str:
    """The lines of a hit's window: the match line whole, the neighbours sharing what is left of ``limit``.

    A neighbour longer than its share is cut on a character boundary (``...``);
    one whose share cannot hold a character and the mark is left out.
    """
    match = match if len(match) <= limit else match[: head_end(match, limit - len(ELLIPSIS))] + ELLIPSIS
    whole = "\n".join([*before, match, *after])
    if len(whole) <= limit:
        return whole
    neighbours = len(before) + len(after)
    share = (limit - len(match) - neighbours) // neighbours if neighbours else 0

    def fit(line: str) -> str | None:
        if len(line) <= share:
            return line
        cut = head_end(line, share - len(ELLIPSIS))
        return line[:cut] + ELLIPSIS if cut > 0 else None

    lines = [x for x in map(fit, before) if x is not None]
    lines.append(match)
    lines.extend(x for x in map(fit, after) if x is not None)
    return "\n".join(lines)
