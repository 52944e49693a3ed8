"""Cut points inside text that never split a character a reader sees as one (pure; shared by the read
side's snippets and the summarizer's and the context's cuts).

Python strings are code points, so a surrogate pair only exists as two lone
surrogates (text decoded with ``surrogatepass``); such a pair is kept whole.
Beyond that a cut never falls before a combining mark, a variation selector,
an emoji modifier or tag, a zero-width (non-)joiner or the character after a
joiner, inside a regional-indicator flag pair, or inside a Hangul syllable
spelled with conjoining jamo (decomposed, NFD: a leading consonant joins the
vowel or syllable after it, vowels and final consonants the character before),
between a carriage return and its line feed, or inside an Indic conjunct (a
consonant after a virama of its script, Unicode's rule GB9c). CJK text has no
spaces: any other code point boundary is a valid cut.
"""

from __future__ import annotations

import unicodedata

_ZWJ = "\u200d"


def _extends(ch: str) -> bool:
    """Whether ``ch`` belongs to the character before it (never starts a cut-off piece)."""
    cp = ord(ch)
    if unicodedata.category(ch) in ("Mn", "Me", "Mc"):
        return True
    return (
        cp in (0x200C, 0x200D)
        or 0xFE00 <= cp <= 0xFE0F  # variation selectors
        or 0xE0100 <= cp <= 0xE01EF
        or 0x1F3FB <= cp <= 0x1F3FF  # emoji skin-tone modifiers
        or 0xE0020 <= cp <= 0xE007F  # emoji tag sequences
        or 0x1160 <= cp <= 0x11FF  # Hangul medial vowels and final consonants
        or 0xD7B0 <= cp <= 0xD7FF
        or 0xDC00 <= cp <= 0xDFFF  # a low surrogate: the second half of a pair
    )


def _leading_jamo(ch: str) -> bool:
    cp = ord(ch)
    return 0x1100 <= cp <= 0x115F or 0xA960 <= cp <= 0xA97F


def _joins_leading_jamo(ch: str) -> bool:
    """A leading consonant, or a precomposed syllable: what a leading consonant before it joins."""
    return _leading_jamo(ch) or 0xAC00 <= ord(ch) <= 0xD7A3


_LINKERS = frozenset("\u094d\u09cd\u0acd\u0b4d\u0c4d\u0d4d")
"""The viramas that join the consonants around them into one conjunct (Devanagari, Bengali, Gujarati, Oriya,
Telugu, Malayalam: Unicode's ``Indic_Conjunct_Break=Linker``)."""


def _joins_conjunct(text: str, i: int) -> bool:
    """Whether ``text[i]`` (in the Indic blocks), a letter, follows a virama (across marks): one conjunct."""
    after = text[i]
    if unicodedata.category(after) != "Lo":
        return False
    j = i - 1
    while j >= 0 and _extends(text[j]):
        if text[j] in _LINKERS:
            # Any Indic letter after a linker joins it, whatever its block (as the regex module's \X
            # does); an independent vowel there is kept too: over-cautious, never a split cluster.
            return True
        j -= 1
    return False


def _regional(ch: str) -> bool:
    return 0x1F1E6 <= ord(ch) <= 0x1F1FF


def is_boundary(text: str, i: int) -> bool:
    """Whether ``text[:i]`` / ``text[i:]`` splits no user-perceived character."""
    if i <= 0 or i >= len(text):
        return True
    after, before = text[i], text[i - 1]
    if _extends(after) or before == _ZWJ or (before == "\r" and after == "\n"):
        return False
    if "\u0900" <= after <= "\u0d7f" and _joins_conjunct(text, i):
        return False
    if _leading_jamo(before) and _joins_leading_jamo(after):
        return False
    if _regional(before) and _regional(after):
        run = 0
        j = i - 1
        while j >= 0 and _regional(text[j]):
            run += 1
            j -= 1
        return run % 2 == 0
    return True


def head_end(text: str, i: int) -> int:
    """The largest boundary ``<= i``: where a head of at most ``i`` characters ends."""
    i = max(0, min(i, len(text)))
    while i > 0 and not is_boundary(text, i):
        i -= 1
    return i


def tail_start(text: str, j: int) -> int:
    """The smallest boundary ``>= j``: where a tail of at most ``len(text) - j`` characters starts."""
    j = max(0, min(j, len(text)))
    while j < len(text) and not is_boundary(text, j):
        j += 1
    return j


def head_and_tail(text: str, keep: int) -> tuple[str, str]:
    """At most ``keep`` characters of ``text``: ``ceil(keep/2)`` from the head, the rest from the tail.

    Both ends move inward to the nearest boundary, so the two pieces may hold
    a few characters less than ``keep``; they never overlap.
    """
    if keep >= len(text):
        return text, ""
    if keep <= 0:
        return "", ""
    head = head_end(text, (keep + 1) // 2)
    tail = tail_start(text, max(len(text) - (keep - (keep + 1) // 2), head))
    return text[:head], text[tail:]
