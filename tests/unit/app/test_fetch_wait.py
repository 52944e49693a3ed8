"""The batching fetch wait: what the event→job budget leaves after the worker's recent lag, never below the floor."""

from __future__ import annotations

import pytest

from streams.app.fetch_wait import MARGIN_MS, FetchWait


def test_until_a_batch_is_noted_the_wait_is_the_floor() -> None:
    assert FetchWait(30, 50).wait_ms() == 30


def test_a_lightly_loaded_worker_waits_what_the_budget_leaves() -> None:
    wait = FetchWait(30, 50)
    for _ in range(200):
        wait.note(0.004)
    assert wait.wait_ms() == int(50 - MARGIN_MS - 4)


def test_a_slow_batch_brings_the_wait_down_at_once_and_it_recovers_as_fast_ones_follow() -> None:
    wait = FetchWait(30, 50)
    for _ in range(200):
        wait.note(0.002)
    before = wait.wait_ms()
    wait.note(0.040)
    assert wait.wait_ms() == 30
    after: list[int] = []
    for _ in range(60):
        wait.note(0.002)
        after.append(wait.wait_ms())
    assert after == sorted(after)  # never longer than the one after it
    assert after[0] == 30
    assert after[-1] == before


def test_a_lag_past_the_budget_keeps_the_floor() -> None:
    wait = FetchWait(30, 50)
    wait.note(0.5)
    assert wait.wait_ms() == 30


@pytest.mark.parametrize(("floor", "budget"), [(30, 0), (100, 50)])
def test_without_a_budget_or_with_a_floor_above_it_the_wait_is_the_floor(floor: int, budget: int) -> None:
    wait = FetchWait(floor, budget)
    for _ in range(100):
        wait.note(0.001)
    assert wait.wait_ms() == floor


def test_after_summarization_work_the_wait_is_the_floor_until_a_quiet_stretch() -> None:
    """A job or reply emitted, or jobs in flight: summarization crosses the same fetches, so no longer waits."""
    wait = FetchWait(30, 50, quiet_s=1.0)
    for _ in range(200):
        wait.note(0.002, now=10.0)
    quiet = wait.wait_ms(now=10.0)
    assert quiet > 30
    wait.note(0.002, busy=True, now=10.0)
    assert wait.wait_ms(now=10.0) == 30
    wait.note(0.002, now=10.5)
    assert wait.wait_ms(now=10.9) == 30
    assert wait.wait_ms(now=11.0) == quiet
