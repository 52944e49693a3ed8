"""Which keys a trigger on a filter key summarizes: the allowlist and the cascade.

Follows the Go guide's "限制摘要目标" section: the allowlist only restricts branch
keys (``""`` is always allowed); ``None`` means no restriction; an explicit empty
list, or ``[""]``, allows no branch key. With the cascade on (the default) a branch
trigger also refreshes the full-session summary.
"""

from __future__ import annotations

from collections.abc import Iterable

from streams.rules.filter_keys import FULL_SESSION, related

Allowlist = frozenset[str] | None


def normalize_allowlist(entries: Iterable[str] | None) -> Allowlist:
    """``None`` stays ``None``; a list becomes the set of its stripped non-empty entries."""
    if entries is None:
        return None
    return frozenset(e.strip() for e in entries if e.strip())


def allows_filter_key(key: str, allowlist: Allowlist) -> bool:
    """``""`` always; else no allowlist, or an entry on the same line of ancestry."""
    if key == FULL_SESSION or allowlist is None:
        return True
    return any(related(entry, key) for entry in allowlist)


def summary_targets(key: str, allowlist: Allowlist = None, cascade: bool = True) -> tuple[str, ...]:
    """The keys to summarize when ``key`` triggers: the branch first, then ``""``.

    ``""`` → ``("",)``. A branch → itself if allowed, plus ``""`` if the cascade is
    on. An empty result means nothing is summarized.
    """
    if key == FULL_SESSION:
        return (FULL_SESSION,)
    targets: list[str] = []
    if allows_filter_key(key, allowlist):
        targets.append(key)
    if cascade:
        targets.append(FULL_SESSION)
    return tuple(targets)


def skips_cascade_for_fork(trigger_key: str, target: str, forked: bool) -> bool:
    """Whether a pass triggered on ``trigger_key`` that forks the caller's model
    request skips ``target`` (the Go guide's cache-safe cascade skip).

    The caller's request shows the branch's view, so it cannot stand in for the
    whole session: the cascaded full-session target is skipped — also when
    forced — and needs its own trigger.
    """
    return forked and target == FULL_SESSION and trigger_key != FULL_SESSION
