"""Which events belong to a filter key (pure; mirrors ``streams.rules.filter_keys``).

``projections`` may not import ``streams``, so the one rule the read side
needs is restated here. ``tests/unit/projections/test_pure_rules.py`` checks
it against the streams implementation so the two cannot drift apart.
"""

from __future__ import annotations

FULL_SESSION = ""
SEPARATOR = "/"


def is_within(key: str, scope: str) -> bool:
    """``key`` equals ``scope`` or is one of its descendants (whole segments)."""
    return key == scope or key.startswith(scope + SEPARATOR)


def related(a: str, b: str) -> bool:
    """Same line of ancestry (either direction, whole segments); an empty key relates to everything."""
    if not a or not b:
        return True
    return (a + SEPARATOR).startswith(b + SEPARATOR) or (b + SEPARATOR).startswith(a + SEPARATOR)


def in_summary_input(event_key: str, target: str) -> bool:
    """Whether an event with ``event_key`` belongs to what ``target``'s summary covers.

    Exactly what a prompt on ``target`` shows: the full session takes every
    event; a branch its ancestors, itself, its descendants and the events
    without a key (siblings are excluded). The summary's boundary cuts that
    prompt, so it holds everything the cut hides.
    """
    return related(event_key, target)


def ancestors_of(key: str) -> list[str]:
    """The non-empty proper prefixes of ``key`` by whole segments, nearest first (``"a/b/c"`` → ``a/b``, ``a``)."""
    parts = key.split(SEPARATOR) if key else []
    return [SEPARATOR.join(parts[:i]) for i in range(len(parts) - 1, 0, -1)]
