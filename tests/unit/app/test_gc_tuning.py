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


@pytest.mark.usefixtures("restore_gc")
def test_a_tuned_block_raises_the_thresholds_and_gives_the_previous_ones_back() -> None:
    from streams.app.gc_tuning import tuned_gc

    gc.unfreeze()
    gc.set_threshold(700, 10, 10)
    with tuned_gc():
        assert gc.get_threshold() == GC_THRESHOLDS
        assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0  # what the block froze is thawed


@pytest.mark.usefixtures("restore_gc")
def test_a_tuned_block_keeps_a_workers_freeze() -> None:
    from streams.app.gc_tuning import tuned_gc

    held = [object()]  # alive before the worker's freeze, so frozen with everything else
    tune_gc()
    assert not _collected(held)
    with tuned_gc():
        pass
    # Not the freeze count: frozen objects freed meanwhile (other threads run too) lower it.
    assert gc.get_threshold() == GC_THRESHOLDS and not _collected(held)


def _collected(obj: object) -> bool:
    """Whether the collector's generations hold ``obj`` (frozen objects are in none of them)."""
    return any(o is obj for o in gc.get_objects())


@pytest.mark.usefixtures("restore_gc")
async def test_an_in_process_replay_runs_with_the_tuned_collector_and_restores_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from schemas.settings import Settings
    from streams.app.cache import SummaryCache
    from streams.summarizer.model import ModelResponse
    from streams.summarizer.request import ChatRequest
    from tests.unit.app.test_inprocess_replay import replay
    from tests.unit.summarizer.helpers import EchoModel

    seen: list[tuple[int, int, int]] = []
    complete = EchoModel.complete

    async def spy(self: EchoModel, request: ChatRequest) -> ModelResponse:
        seen.append(gc.get_threshold())  # the thresholds while the replay runs (the model is called inside)
        return await complete(self, request)

    gc.set_threshold(700, 10, 10)
    monkeypatch.setattr(EchoModel, "complete", spy)
    stats, _ = await replay(Settings.model_validate({"summary": {"event_threshold": 3}}), SummaryCache())
    assert stats.llm_calls > 0 and seen and set(seen) == {GC_THRESHOLDS}
    assert gc.get_threshold() == (700, 10, 10)


@pytest.mark.usefixtures("restore_gc")
def test_settle_freezes_what_the_block_built_and_the_block_thaws_it() -> None:
    from streams.app.gc_tuning import tuned_gc

    gc.unfreeze()
    with tuned_gc() as settle:
        kept = [[i] for i in range(1_000)]  # what a replay keeps to its end (lists: tracked by the collector)
        assert _collected(kept[0])
        settle()
        assert not _collected(kept[0])  # out of the collector's scans until the block ends
    assert gc.get_freeze_count() == 0 and _collected(kept[0])


@pytest.mark.usefixtures("restore_gc")
def test_settle_freezes_nothing_more_inside_a_workers_freeze() -> None:
    from streams.app.gc_tuning import tuned_gc

    tune_gc()
    with tuned_gc() as settle:
        kept = [[i] for i in range(10)]
        settle()
        assert _collected(kept[0])  # the block did not freeze it: it would stay frozen after the block
    assert _collected(kept[0])


@pytest.mark.usefixtures("restore_gc")
async def test_an_in_process_replay_settles_what_it_keeps(monkeypatch: pytest.MonkeyPatch) -> None:
    from schemas.settings import Settings
    from streams.app import inprocess
    from streams.app.cache import SummaryCache
    from tests.unit.app.test_inprocess_replay import replay

    gc.unfreeze()
    freezes: list[int] = []
    freeze = gc.freeze

    def counting_freeze() -> None:
        freezes.append(1)
        freeze()

    monkeypatch.setattr(inprocess, "SETTLE_EVERY", 5)
    monkeypatch.setattr(gc, "freeze", counting_freeze)
    stats, _ = await replay(Settings.model_validate({"summary": {"event_threshold": 3}}), SummaryCache())
    assert stats.events >= 10 and len(freezes) > 1  # the block's own freeze, then one per 5 records
    assert gc.get_freeze_count() == 0
