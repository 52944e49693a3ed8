"""CPU time of processes from ``/proc`` (wall clock is noisy on a shared 2-core machine)."""

from __future__ import annotations

import os
import time
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds ``pid`` has used so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime (fields 14 and 15 of stat)


def thread_cpu_s(pid: int) -> dict[int, float]:
    """User + system CPU seconds of each live thread of ``pid``, by thread id (the main thread's is ``pid``)."""
    out: dict[int, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        out[int(task.name)] = (int(fields[11]) + int(fields[12])) / _TICKS
    return out


def find_cassandra_pid(port: int) -> int | None:
    """The pid of the local ``CassandraDaemon`` whose config names native port ``port`` (``None``: not found)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"org.apache.cassandra.service.CassandraDaemon" not in args:
            continue
        config = next((a[len(b"-Dcassandra.config=file://") :] for a in args
                       if a.startswith(b"-Dcassandra.config=file://")), None)  # fmt: skip
        try:
            if config is None or f"native_transport_port: {port}\n" in Path(config.decode()).read_text():
                return int(proc.name)
        except OSError:
            continue
    return None


class CpuMeter:
    """CPU seconds used by this process and by ``other_pid`` (when given) since ``start()``."""

    def __init__(self, other_pid: int | None) -> None:
        self.other_pid = other_pid
        self._self0 = self._other0 = 0.0
        self._wall0 = 0.0

    def start(self) -> None:
        self._self0 = time.process_time()
        self._other0 = process_cpu_s(self.other_pid) if self.other_pid else 0.0
        self._wall0 = time.perf_counter()

    def report(self, events: int, unit: str = "event") -> str:
        """One line: µs of CPU per ``unit`` for this process and the other one, and the load average."""
        own = time.process_time() - self._self0
        other = process_cpu_s(self.other_pid) - self._other0 if self.other_pid else float("nan")
        wall = time.perf_counter() - self._wall0
        load = os.getloadavg()
        return (
            f"cpu per {unit}: this process {own / events * 1e6:.0f} µs, cassandra {other / events * 1e6:.0f} µs "
            f"(pid {self.other_pid}); wall {wall:.1f}s; load avg {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
        )
