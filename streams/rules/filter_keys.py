"""The filter-key hierarchy: ``/``-separated branch keys and who counts toward whom.

``""`` is the whole session. A branch key is ``"<app_name>/<branch>[/<sub>...]"``.
Matching is by whole segments: ``app/tool`` is an ancestor of ``app/tool/search``
and unrelated to ``app/toolbox``.
"""

from __future__ import annotations

from functools import lru_cache

FULL_SESSION = ""
SEPARATOR = "/"


def is_within(key: str, scope: str) -> bool:
    """``key`` equals ``scope`` or is one of its descendants (``scope`` non-empty)."""
    return key == scope or key.startswith(scope + SEPARATOR)


def related(a: str, b: str) -> bool:
    """Same line of ancestry (either direction); an empty key relates to everything.

    This is the Go ``Event.filter`` / allowlist rule.
    """
    if not a or not b:
        return True
    return (a + SEPARATOR).startswith(b + SEPARATOR) or (b + SEPARATOR).startswith(a + SEPARATOR)


def in_summary_input(event_key: str, target: str) -> bool:
    """Whether an event belongs to the summary input (the delta) of ``target``.

    Exactly the events a prompt on ``target`` shows (``related``): the full
    session takes every event; a branch its line of ancestry — ancestors,
    itself, descendants — plus the events without a key. The boundary of
    ``target``'s summary cuts the prompt's history, so the summary must hold
    everything the cut hides: an ancestor's event (the root agent's turn a
    sub-agent saw) is summarized by the branch too. Go excludes ancestors here
    while its prompt shows them, which hides them unsummarized.
    """
    return related(event_key, target)


def in_subtree(event_key: str, target: str) -> bool:
    """Whether an event is in ``target``'s own subtree (or keyless; the full session: every event).

    What a branch's trigger index and threshold counters follow: a root
    agent's chatter alone does not trigger its sub-agents' summaries.
    """
    if target == FULL_SESSION or event_key == FULL_SESSION:
        return True
    return is_within(event_key, target)


def counts_toward(event_key: str, target: str, app_name: str) -> bool:
    """Whether an event counts toward the thresholds of ``target``.

    Branch: its subtree plus keyless events. Full session: keyless events and
    events keyed exactly ``app_name`` (child branches are ignored, so that
    sub-agent chatter alone does not trigger a full-session summary).
    """
    if event_key == FULL_SESSION:
        return True
    if target == FULL_SESSION:
        return event_key == app_name
    return is_within(event_key, target)


@lru_cache(maxsize=4096)
def ancestors(key: str) -> tuple[str, ...]:
    """The non-empty prefixes of ``key`` by whole segments, shortest first, ``key`` included."""
    if not key:
        return ()
    parts = key.split(SEPARATOR)
    return tuple(SEPARATOR.join(parts[: i + 1]) for i in range(len(parts)))
