"""A worker and a projector as child processes, for the demo and the examples."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from streams.errors import ServiceError


def distill_executable() -> str:
    """This environment's ``distill`` (the venv's), else the one on ``PATH``."""
    argv0 = Path(sys.argv[0])
    if argv0.name == "distill" and argv0.exists():
        return str(argv0.resolve())
    sibling = Path(sys.executable).with_name("distill")
    return str(sibling) if sibling.exists() else "distill"


class LocalPipeline:
    """``distill worker`` and ``distill projector`` started in ``workdir``, logs beside them.

    ``distill projector`` runs both read-side stages (the critical path and,
    in a second consumer group, the recall indexer), so ``session_search``
    works against this pipeline as it does in a deployment.

    Entering waits until the worker has its partitions; leaving stops both
    (SIGTERM, then SIGKILL after 20 s) unless ``keep_running``.
    """

    def __init__(self, workdir: Path, *, keep_running: bool = False, env: Mapping[str, str] | None = None) -> None:
        self.workdir = workdir
        self.env = dict(env or {})
        self.keep_running = keep_running
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._log_start: dict[str, int] = {}

    def log(self, name: str) -> Path:
        return self.workdir / f"{name}.log"

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        exe = distill_executable()
        for name in ("worker", "projector"):
            with self.log(name).open("ab") as log:
                self._log_start[name] = log.tell()  # the logs are appended to: earlier runs' lines are not this run's
                self.procs[name] = subprocess.Popen(
                    [exe, name], stdout=log, stderr=subprocess.STDOUT, env=self._child_env()
                )

    def wait_for_worker(self, timeout: float) -> None:
        """Block until the worker logged its partition assignment."""
        proc, log = self.procs["worker"], self.log("worker")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise ServiceError(f"the worker exited (code {proc.returncode}); see {log}")
            if log.exists() and '"partitions assigned"' in self._this_run(log, "worker"):
                return
            time.sleep(0.5)
        raise ServiceError(f"the worker did not get its partitions within {timeout:.0f} s; see {log}")

    def _this_run(self, log: Path, name: str) -> str:
        with log.open("rb") as handle:
            handle.seek(self._log_start.get(name, 0))
            return handle.read().decode(errors="replace")

    def _child_env(self) -> dict[str, str] | None:
        """The parent's environment plus ``env`` (``None``: inherit unchanged)."""
        if not self.env:
            return None
        import os

        return {**os.environ, **self.env}

    def stop(self) -> list[tuple[str, int]]:
        """Stop both processes; returns ``(name, pid)`` of each stopped."""
        stopped = []
        for proc in self.procs.values():  # both shut down at once: each takes seconds to leave its group
            proc.terminate()
        for name, proc in self.procs.items():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            stopped.append((name, proc.pid))
        self.procs.clear()
        return stopped

    def __enter__(self) -> LocalPipeline:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if not self.keep_running:
            self.stop()
