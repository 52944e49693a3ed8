"""The critical path first: the indexer holds back while a projector of the same partitions is behind.

Both stages write to the same Cassandra, and an indexer catching up (each
token an SAI posting) can keep it busy on its own: after an outage, or with
a backlog, the projector's writes would wait behind the index's. The gate
reads the projector's heartbeats (``projector_progress``, rows of any stage
but the indexer's two) for the partitions of a batch: while a fresh one says the
projector is more than ``max_behind`` records behind on one of them, the
indexer waits (rechecking every ``check_s``, at most ``max_wait_s`` per
batch, so a projector stuck behind cannot stop the index for good). A
projector that writes no heartbeat (stopped, or an old one) holds nothing
back: only a fresh heartbeat (``stale_s``) counts.

A stage of lower priority (the index's deep stage behind its primary one)
passes ``behind_error`` instead: past ``max_wait_s`` the gate raises it, and
the stage's runner holds the batch (consumer paused) and tries again, so the
stage makes no progress at all while the one it yields to is behind. With
the deep stage going on after 30 s, the two shared the node at a rate it
could not index whole, and both fell behind.

Pure decision (:func:`projector_behind`) and a small reader around it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from cassandra.cluster import Session

from projections.cassandra_session import aexecute
from projections.stage import INDEX_STAGES

DEFAULT_MAX_BEHIND = 2000
"""Records a projector may be behind before the indexer yields (about one of its batches)."""


def projector_behind(
    rows: Iterable[Any], now: datetime, max_behind: int, stale_s: float, stage: str | None = None
) -> bool:
    """Whether a fresh projector heartbeat among ``rows`` is more than ``max_behind`` records behind (pure).

    ``stage``: the heartbeats of that stage instead of the projector's (the deep index stage yields to
    the primary one: ``INDEX_STAGE``).
    """
    for r in rows:
        row_stage = getattr(r, "stage", None)
        if (row_stage != stage if stage is not None else row_stage in INDEX_STAGES) or r.updated_at is None:
            continue
        updated = r.updated_at if r.updated_at.tzinfo else r.updated_at.replace(tzinfo=UTC)
        if (now - updated).total_seconds() > stale_s:
            continue
        if (r.log_end_offset or 0) - (r.next_offset or 0) > max_behind:
            return True
    return False


class CriticalPathGate:
    """Waits while a projector on the batch's partitions is behind (see the module)."""

    def __init__(
        self, session: Session, keyspace: str, *, max_behind: int = DEFAULT_MAX_BEHIND, stale_s: float = 5.0,
        check_s: float = 0.25, max_wait_s: float = 30.0, stage: str | None = None,
        behind_error: Callable[[str], Exception] | None = None,
    ) -> None:  # fmt: skip
        """``stage``: wait for that stage's heartbeats instead of the projector's (see ``projector_behind``).
        ``behind_error``: raised (with what is behind) when ``max_wait_s`` passes and it still is (see the module)."""
        self._session = session
        self.stage = stage
        self._select = session.prepare(
            f"SELECT stage, next_offset, log_end_offset, updated_at FROM {keyspace}.projector_progress "
            "WHERE topic = ? AND partition = ?"
        )
        self.max_behind = max_behind
        self.stale_s = stale_s
        self.check_s = check_s
        self.max_wait_s = max_wait_s
        self.behind_error = behind_error
        self.waited_s = 0.0
        """Seconds spent waiting so far (for logs and benchmarks)."""

    async def wait(self, partitions: Sequence[tuple[str, int]]) -> float:
        """Return once no fresh projector heartbeat of ``partitions`` is behind (or ``max_wait_s``); the wait."""
        started = time.monotonic()
        behind: list[tuple[str, int]] = []
        while time.monotonic() - started < self.max_wait_s:
            try:
                pages = await asyncio.gather(*(aexecute(self._session, self._select, tp) for tp in partitions))
            except Exception:  # advisory: a failed read never holds the index back
                behind = []
                break
            now = datetime.now(UTC)
            behind = [tp for tp, rows in zip(partitions, pages, strict=True)
                      if projector_behind(rows, now, self.max_behind, self.stale_s, self.stage)]  # fmt: skip
            if not behind:
                break
            await asyncio.sleep(self.check_s)
        waited = time.monotonic() - started
        self.waited_s += waited
        if behind and self.behind_error is not None:
            named = ", ".join(f"{t}[{p}]" for t, p in behind[:4])
            raise self.behind_error(f"the {self.stage or 'projector'} stage is more than {self.max_behind} "
                                    f"records behind on {named} after {waited:.1f}s")  # fmt: skip
        return waited
