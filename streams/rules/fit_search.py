"""The one search behind every "keep as much as still fits" decision. Pure.

The summarizer sizes its pass (events, payload caps, the previous summary's
share) and the context assembler sizes its head + tail cuts with it.
"""

from __future__ import annotations

from collections.abc import Callable


def largest_fitting(lo: int, hi: int, fits: Callable[[int], bool]) -> int | None:
    """The largest ``n`` in ``[lo, hi]`` with ``fits(n)`` (``None`` when not even ``lo`` fits).

    ``fits`` must be monotone: true up to some ``n``, false above it.
    """
    if hi < lo or not fits(lo):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


__all__ = ["largest_fitting"]
