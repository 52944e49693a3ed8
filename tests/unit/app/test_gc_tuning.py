"""The worker's collector settings: larger thresholds, start-up objects frozen out of the scans."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from streams.app.gc_tuning import GC_THRESHOLDS, tune_gc


@pytest.fixture
def restore_gc() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)
    gc.unfreeze()


@pytest.mark.usefixtures("restore_gc")
def test_thresholds_are_raised_and_startup_objects_frozen() -> None:
    alive = [object() for _ in range(10)]
    tune_gc()
    assert gc.get_threshold() == GC_THRESHOLDS
    assert GC_THRESHOLDS[0] > 700  # fewer young collections than CPython's default
    assert gc.get_freeze_count() > 0
    assert alive


@pytest.mark.usefixtures("restore_gc")
def test_cycles_are_still_collected() -> None:
    import weakref

    tune_gc()

    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other = b, a  # type: ignore[attr-defined]
    probe = weakref.ref(a)
    del a, b
    gc.collect()
    assert probe() is None
