"""A wait that goes on is logged (and again at each doubling); one that ends in time is not."""

from __future__ import annotations

import asyncio
import logging

import pytest

from streams.app.batch_produce import produce_fields
from streams.app.slow_wait import warn_if_slow


async def test_a_long_wait_is_logged_at_each_doubling_until_it_ends(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="streams.app.slow_wait")
    with warn_if_slow("produce not acknowledged", {"partitions": "jobs[1]"}, after_s=0.05):
        await asyncio.sleep(0.3)  # warnings at 0.05, 0.1 and 0.2 s; the next (0.4 s) never comes
    await asyncio.sleep(0.3)
    records = [r for r in caplog.records if r.name == "streams.app.slow_wait"]
    assert [r.getMessage().split(":")[0] for r in records] == ["produce not acknowledged"] * 3
    assert all(getattr(r, "partitions", None) == "jobs[1]" for r in records)
    assert "still waiting after 0 s" in records[0].getMessage()


async def test_a_wait_that_ends_in_time_is_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="streams.app.slow_wait")
    asked: list[int] = []
    with warn_if_slow("catching up", lambda: asked.append(1) or {}, after_s=0.2):
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.3)
    assert not [r for r in caplog.records if r.name == "streams.app.slow_wait"]
    assert not asked  # the fields of a wait that ended in time are never built


async def test_fields_given_as_a_callable_are_built_when_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="streams.app.slow_wait")
    with warn_if_slow("produce not acknowledged", lambda: {"records": 3}, after_s=0.05):
        await asyncio.sleep(0.08)
    assert [getattr(r, "records", None) for r in caplog.records if r.name == "streams.app.slow_wait"] == [3]


async def test_a_failing_body_stops_the_warnings(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="streams.app.slow_wait")
    with pytest.raises(RuntimeError), warn_if_slow("catching up", {}, after_s=0.05):
        raise RuntimeError("broker gone")
    await asyncio.sleep(0.15)
    assert not [r for r in caplog.records if r.name == "streams.app.slow_wait"]


def test_produce_fields_name_each_partition_once() -> None:
    records = [("jobs", b"k", b"v", 1), ("cl", b"k", None, 0), ("jobs", b"k2", "摘要".encode(), 1)]
    assert produce_fields(records) == {"records": 3, "partitions": "cl[0],jobs[1]"}
