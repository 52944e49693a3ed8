"""Summary jobs give way to waiting events: a step parks until the track agent took its next batch."""

from __future__ import annotations

import asyncio

from streams.app.ingest_first import IngestFirst


async def test_a_step_goes_on_at_once_when_no_record_waits() -> None:
    gate = IngestFirst(lambda: False, most_s=10.0)
    await asyncio.wait_for(gate.turn(), 1.0)
    assert gate.deferred == 0


async def test_steps_park_while_records_wait_and_go_on_once_the_agent_took_its_batch() -> None:
    queued = ["e1", "e2"]
    gate = IngestFirst(lambda: bool(queued), most_s=10.0)
    order: list[str] = []

    async def job(name: str) -> None:
        await gate.turn()
        order.append(name)

    async def track_agent() -> None:
        order.append(f"batch {','.join(queued)}")
        queued.clear()
        gate.taken()

    jobs = [asyncio.ensure_future(job(f"job{i}")) for i in range(3)]
    await asyncio.sleep(0.01)  # the jobs had the loop first, yet none went on
    assert order == [] and gate.deferred == 3
    await track_agent()
    await asyncio.gather(*jobs)
    assert order == ["batch e1,e2", "job0", "job1", "job2"]


async def test_a_step_yields_to_one_batch_not_to_a_backlog() -> None:
    # Records always wait (a backlog): each step waits for the next batch, then runs.
    gate = IngestFirst(lambda: True, most_s=10.0)
    step = asyncio.ensure_future(gate.turn())
    await asyncio.sleep(0.01)
    assert not step.done()
    gate.taken()
    await asyncio.wait_for(step, 1.0)


async def test_a_step_waits_at_most_most_s_and_a_timed_out_or_cancelled_step_leaves_the_others_waiting() -> None:
    gate = IngestFirst(lambda: True, most_s=0.05)
    loop = asyncio.get_running_loop()
    began = loop.time()
    await gate.turn()  # the agent never takes a batch: the step goes on after most_s
    assert 0.04 <= loop.time() - began < 1.0
    patient = IngestFirst(lambda: True, most_s=10.0)
    cancelled, waiting = asyncio.ensure_future(patient.turn()), asyncio.ensure_future(patient.turn())
    await asyncio.sleep(0.01)
    cancelled.cancel()
    await asyncio.sleep(0.01)
    assert not waiting.done()
    patient.taken()
    await asyncio.wait_for(waiting, 1.0)


async def test_off_when_most_s_is_zero() -> None:
    gate = IngestFirst(lambda: True, most_s=0)
    await asyncio.wait_for(gate.turn(), 1.0)
    assert gate.deferred == 0
