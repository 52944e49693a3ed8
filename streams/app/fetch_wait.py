"""How long a fetch waits for more events while they flow: what the event→job budget leaves.

At a low event rate every fetch waits out its whole wait (the 64 KiB it asks for never come)
and each fetch cycle costs the worker about the same CPU whatever it carries (aiokafka's fetch
in the consumer's thread, the hand-offs between the threads, the wake-ups): the longer the
wait, the fewer cycles per event. At 500 events/s the consumer's thread's CPU per event is
inversely proportional to the wait (issue 14: 66-76 µs/event at 30 ms, 37-43 at 60 ms).

What bounds the wait is latency: an event that reaches the broker just after a fetch arrived
there waits the whole wait, then the worker's own time until its job is on the broker. So
the wait is the budget for that (``worker.event_job_budget_ms``, the event→job goal) less what
the worker's batches took lately from their fetch until their writes were sent
(:meth:`FetchWait.note`), less a margin for what neither measures (the producer's linger, the
fetch's way back): a lightly loaded worker waits longer, a busy one (or one that met a slow
batch) no longer than ``worker.batch_fetch_wait_ms``, the floor. Under a backlog the wait does
not matter (the bytes are there at once).

Only while no summarization is under way: the jobs and summaries topics are fetched in the same
requests, so a job's way (picked up from the jobs topic, its summary absorbed from the summaries
topic) waits out a fetch wait at each step, and a session's next job can wait for its previous
one. After a batch that emitted a job or a reply, or one noted while jobs are in flight, the wait
stays at the floor (as before this module) for :data:`QUIET_S`. In the pipeline benchmark (a
job every ~100 ms) lengthened waits without this raised event→job p50 by more than the events'
own waits explain.
"""

from __future__ import annotations

import time

MARGIN_MS = 5.0
"""Of the budget, what the worker does not see: the client's linger, the broker's append, the
fetch's answer on its way and into the event loop."""
QUIET_S = 1.0
"""How long the wait stays at the floor after summarization work was seen (a job's way through
the jobs and summaries topics takes a few fetch cycles)."""
DECAY = 0.9
"""Per noted batch, what the remembered lag keeps of itself (a slow batch shortens the wait at
once, and for about the next 20 batches: a fraction of a second at a low rate)."""


class FetchWait:
    """The batching fetch wait in ms (:meth:`wait_ms`), from the lags of recent batches (:meth:`note`).

    ``floor_ms``: the shortest wait (and the only one when ``budget_ms`` is 0); ``budget_ms``:
    event→job latency the wait and the worker's lag share. Until batches are noted the lag is
    taken to be the whole budget (the wait is the floor).
    """

    __slots__ = ("_busy_until", "_lag_ms", "budget_ms", "decay", "floor_ms", "margin_ms", "quiet_s")

    def __init__(
        self,
        floor_ms: int,
        budget_ms: int = 0,
        margin_ms: float = MARGIN_MS,
        decay: float = DECAY,
        quiet_s: float = QUIET_S,
    ) -> None:
        self.floor_ms = floor_ms
        self.budget_ms = budget_ms
        self.margin_ms = margin_ms
        self.decay = decay
        self.quiet_s = quiet_s
        self._lag_ms = float(budget_ms)
        self._busy_until = 0.0

    def note(self, lag_s: float, busy: bool = False, now: float | None = None) -> None:
        """A batch's records were fetched ``lag_s`` seconds before their writes were sent.

        ``busy``: the batch started summarization work (a job, a reply) or jobs are in flight;
        the wait is then the floor for ``quiet_s`` from ``now`` (``time.monotonic()``).
        """
        if busy:
            self._busy_until = (time.monotonic() if now is None else now) + self.quiet_s
        lag_ms = lag_s * 1000.0
        kept = self._lag_ms * self.decay
        self._lag_ms = lag_ms if lag_ms > kept else kept

    def wait_ms(self, now: float | None = None) -> int:
        """The wait for the next fetch while events flow (``now``: ``time.monotonic()``)."""
        if self.budget_ms <= 0 or (time.monotonic() if now is None else now) < self._busy_until:
            return self.floor_ms
        return max(self.floor_ms, int(self.budget_ms - self.margin_ms - self._lag_ms))


__all__ = ["FetchWait"]
