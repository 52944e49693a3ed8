"""A warning for a wait that goes on: what the worker waits for says so in the log, not only its silence.

A produce that the broker does not acknowledge is retried by the client for as long as
Faust's producer request timeout (20 minutes by default); a catch-up read can wait on
a partition's metadata. Both are waits with nothing to log while they last, and a
worker stalled in one looked idle. :func:`warn_if_slow` logs a warning after
``after_s`` and again at each doubling of the wait, until the wait ends.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

log = logging.getLogger(__name__)

SLOW_WAIT_S = 10.0
"""Seconds before a wait is logged as slow (and again at 2x, 4x, ...)."""


@contextmanager
def warn_if_slow(
    what: str, fields: Mapping[str, Any] | Callable[[], Mapping[str, Any]], after_s: float = SLOW_WAIT_S
) -> Iterator[None]:
    """Log ``what`` with ``fields`` as a warning while the ``with`` body still runs after ``after_s`` s.

    ``fields`` may be a callable: it is called only if a warning is logged (a hot path pays nothing).
    """
    loop = asyncio.get_running_loop()
    started = loop.time()
    handle: asyncio.TimerHandle | None = None

    def warn(delay: float) -> None:
        nonlocal handle
        extra = dict(fields() if callable(fields) else fields)
        log.warning(f"{what}: still waiting after {loop.time() - started:.0f} s", extra=extra)
        handle = loop.call_later(delay, warn, delay * 2)

    handle = loop.call_later(after_s, warn, after_s)
    try:
        yield
    finally:
        handle.cancel()
