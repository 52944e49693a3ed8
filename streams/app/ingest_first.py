"""Summary jobs give way to events waiting for the track agent (event→job latency under job bursts).

The track agent and the summary jobs share one event loop, which runs ready tasks in the
order they became ready. When many sessions fire at once, dozens of job steps (reading a
delta, building a request, parsing an answer, publishing) are ready, each a few hundred µs
to a few ms of CPU; an event fetched meanwhile waited behind all of them before its trigger
was decided (at 500 events/s the event→job p99 was about twice its p50).

:meth:`IngestFirst.turn` is awaited by a job between its steps: while records wait for the
track agent it parks until the agent has taken its next batch (or ``most_s`` passed), then
goes on. It yields to one batch, not to every batch: under a backlog (records always
waiting) each step of a job waits for at most one batch, so jobs keep their share of the
loop instead of starving. A job step already running is never interrupted.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

DEFAULT_MOST_S = 0.05
"""The longest a job step waits for the track agent's next batch (it also goes on then)."""


class IngestFirst:
    """See the module. ``waiting()``: whether records wait for the track agent right now."""

    def __init__(self, waiting: Callable[[], bool], most_s: float = DEFAULT_MOST_S) -> None:
        self._waiting = waiting
        self.most_s = most_s
        self._taken: asyncio.Future[None] | None = None
        self.deferred = 0
        """Job steps that gave way (for tests and the benchmark's curiosity)."""

    def taken(self) -> None:
        """The track agent took a batch: every job step waiting for it goes on."""
        taken, self._taken = self._taken, None
        if taken is not None and not taken.done():
            taken.set_result(None)

    async def turn(self) -> None:
        """Return at once when no record waits; else once the track agent took its next batch."""
        if self.most_s <= 0 or not self._waiting():
            return
        if self._taken is None:
            self._taken = asyncio.get_running_loop().create_future()
        self.deferred += 1
        # shield: a step that timed out (or was cancelled) must not cancel the others' future.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._taken), self.most_s)


__all__ = ["DEFAULT_MOST_S", "IngestFirst"]
