"""The search behind every head + tail cut: the longest rendering that still fits. Pure."""

from __future__ import annotations

from collections.abc import Callable


def longest_fit(lo: int, hi: int, render: Callable[[int], str], fits: Callable[[str], bool]) -> str:
    """``render(k)`` for the largest ``k`` in ``[lo, hi]`` that ``fits`` (``render(lo)`` when none does).

    ``fits(render(k))`` must be monotone: true up to some ``k``, false above it
    (keeping more characters never makes a cut smaller).
    """
    best = render(lo)
    while lo <= hi:
        mid = (lo + hi) // 2
        candidate = render(mid)
        if fits(candidate):
            best, lo = candidate, mid + 1
        else:
            hi = mid - 1
    return best
