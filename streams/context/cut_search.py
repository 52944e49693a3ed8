"""The search behind every head + tail cut: the longest rendering that still fits. Pure."""

from __future__ import annotations

from collections.abc import Callable

from streams.rules.fit_search import largest_fitting


def longest_fit(lo: int, hi: int, render: Callable[[int], str], fits: Callable[[str], bool]) -> str:
    """``render(k)`` for the largest ``k`` in ``[lo, hi]`` that ``fits`` (``render(lo)`` when none does).

    ``fits(render(k))`` must be monotone: true up to some ``k``, false above it
    (keeping more characters never makes a cut smaller).
    """
    rendered: dict[int, str] = {}

    def fits_at(k: int) -> bool:
        rendered[k] = render(k)
        return fits(rendered[k])

    best = largest_fitting(lo, hi, fits_at)
    k = lo if best is None else best
    return rendered[k] if k in rendered else render(k)
