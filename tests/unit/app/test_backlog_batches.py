"""Batches end when the queue behind the stream is empty, or at the size limit; nothing waits for a timer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from streams.app.backlog_batches import backlog_batches, current_generation


async def _from(queue: asyncio.Queue[int | None]) -> AsyncIterator[int]:
    while (item := await queue.get()) is not None:
        yield item


async def test_a_batch_is_what_was_waiting() -> None:
    queue: asyncio.Queue[int | None] = asyncio.Queue()
    for i in range(5):
        queue.put_nowait(i)
    batches = backlog_batches(_from(queue), queue.qsize, 100)
    assert await anext(batches) == [0, 1, 2, 3, 4]
    queue.put_nowait(5)
    assert await anext(batches) == [5]  # alone: it does not wait for company


async def test_a_lone_event_is_handed_over_at_once() -> None:
    queue: asyncio.Queue[int | None] = asyncio.Queue()
    batches = backlog_batches(_from(queue), queue.qsize, 100)
    later = asyncio.get_running_loop().call_later(0.01, queue.put_nowait, 7)
    try:
        started = asyncio.get_running_loop().time()
        assert await asyncio.wait_for(anext(batches), 1) == [7]
        assert asyncio.get_running_loop().time() - started < 0.5
    finally:
        later.cancel()


async def test_batches_are_cut_at_max_size_in_order() -> None:
    queue: asyncio.Queue[int | None] = asyncio.Queue()
    for i in range(7):
        queue.put_nowait(i)
    queue.put_nowait(None)
    assert [b async for b in backlog_batches(_from(queue), queue.qsize, 3)] == [[0, 1, 2], [3, 4, 5], [6]]


async def test_the_tail_is_yielded_when_the_source_ends() -> None:
    async def three() -> AsyncIterator[int]:
        for i in range(3):
            yield i

    assert [b async for b in backlog_batches(three(), lambda: 1, 10)] == [[0, 1, 2]]


async def test_max_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        await anext(backlog_batches(_from(asyncio.Queue()), lambda: 0, 0))


def test_records_of_an_earlier_generation_are_left_out() -> None:
    class Msg:
        def __init__(self, generation_id: int | None) -> None:
            self.generation_id = generation_id

    class Ev:
        def __init__(self, name: str, generation_id: int | None) -> None:
            self.name, self.message = name, Msg(generation_id)

    held = [Ev("a", 3), Ev("b", 3), Ev("c", 4), Ev("d", 4)]
    assert [e.name for e in current_generation(held, 4)] == ["c", "d"]
    assert current_generation(held, 5) == []
