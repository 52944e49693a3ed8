"""Choices for generated test cases, from Hypothesis or from a seeded ``random.Random``.

A generator written against :class:`Picks` runs both ways: under Hypothesis
(which shrinks a failure to a small example, but spends most of its time in its
own engine) and from a seed (thousands of cases a second, reproducible from
the seed a failure names). Property tests run a few hundred Hypothesis examples
and their acceptance-size run from seeds.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Protocol, TypeVar

from hypothesis import strategies as st

T = TypeVar("T")


class Picks(Protocol):
    def integer(self, low: int, high: int) -> int:
        """An integer in ``[low, high]``."""
        ...

    def choice(self, options: Sequence[T]) -> T: ...

    def boolean(self) -> bool: ...

    def permutation(self, items: Sequence[T]) -> list[T]: ...

    def subset(self, options: Sequence[T], max_size: int) -> set[T]: ...


class HypothesisPicks:
    """Choices drawn from a Hypothesis ``data()`` object (shrinkable)."""

    def __init__(self, draw: st.DrawFn) -> None:
        self._draw = draw

    def integer(self, low: int, high: int) -> int:
        return self._draw(st.integers(low, high))

    def choice(self, options: Sequence[T]) -> T:
        # An index (shrinks toward the first option, as ``sampled_from`` does): ``integers`` strategies
        # are cached, a ``sampled_from`` of a list is built and checked again on every draw.
        return options[self._draw(st.integers(0, len(options) - 1))]

    def boolean(self) -> bool:
        return self._draw(st.booleans())

    def permutation(self, items: Sequence[T]) -> list[T]:
        return self._draw(st.permutations(items))

    def subset(self, options: Sequence[T], max_size: int) -> set[T]:
        return self._draw(st.sets(st.sampled_from(options), max_size=max_size))


class SeededPicks:
    """Choices from ``random.Random(seed)``: the same seed, the same case."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._rng = random.Random(seed)

    def integer(self, low: int, high: int) -> int:
        return self._rng.randint(low, high)

    def choice(self, options: Sequence[T]) -> T:
        return options[self._rng.randrange(len(options))]

    def boolean(self) -> bool:
        return self._rng.random() < 0.5

    def permutation(self, items: Sequence[T]) -> list[T]:
        out = list(items)
        self._rng.shuffle(out)
        return out

    def subset(self, options: Sequence[T], max_size: int) -> set[T]:
        return {self.choice(options) for _ in range(self.integer(0, max_size))}
