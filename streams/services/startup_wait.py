"""How long ``distill services up`` waits for a booting JVM: as long as it makes progress.

A broker that holds thousands of partition logs (a data directory that test runs
left topics in) spends minutes loading them on a loaded 2-core box, logging all the
while; a fixed deadline failed such a boot that was nearly done. The wait therefore
ends with an error only when the service's log has not grown for ``stall_s``
seconds, or when ``cap_factor × stall_s`` have passed in all (a process that logs
forever without answering). The log is the one its launch started empty.
"""

from __future__ import annotations

from dataclasses import dataclass, field

CAP_FACTOR = 5.0
"""The whole wait is bounded by this many stall windows."""


@dataclass
class StartupWait:
    """Decides, from the clock and the size of the service's log, whether to keep waiting."""

    stall_s: float
    started_at: float
    cap_factor: float = CAP_FACTOR
    _log_size: int = field(default=0, init=False)
    _progress_at: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        if self.stall_s <= 0:
            raise ValueError("stall_s must be positive")
        self._progress_at = self.started_at

    def give_up(self, now: float, log_size: int) -> str | None:
        """``None`` to keep waiting, else why the wait ends (for the error message)."""
        # The log starts empty at each launch (the previous run's is kept as ``.out.1``), so what is
        # there at the first look was written since: progress. Kafka is awaited before Cassandra, so
        # Cassandra's first look can come minutes after its launch, its log long grown meanwhile.
        if log_size > self._log_size:
            self._progress_at = now
            self._log_size = log_size
        elapsed = now - self.started_at
        if elapsed > self.cap_factor * self.stall_s:
            return f"not ready after {elapsed:.0f} s, {self.cap_factor:g}× the start timeout of {self.stall_s:g} s"
        if now - self._progress_at > self.stall_s:
            return f"not ready after {elapsed:.0f} s, its log silent for {now - self._progress_at:.0f} s"
        return None
