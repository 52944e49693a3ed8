"""Starting, finding and stopping the JVM processes distill owns, by pid file."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from streams.errors import ServiceError

_STARTED: dict[int, subprocess.Popen[bytes]] = {}
"""The processes this process started, by pid, until stopped: how one that died while it booted ended."""


@dataclass(frozen=True)
class ManagedProcess:
    """A process distill started: its pid file and the marker in its command line.

    The marker (the service's data directory) guards against a recycled pid:
    a pid whose command line lacks it is not ours and is never signalled.
    """

    name: str
    pid_file: Path
    marker: str

    def pid(self) -> int | None:
        """The pid of our running process, or ``None``."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        started = _STARTED.get(pid)
        if started is not None:
            # Ours for certain while unreaped (its pid cannot be reused), whatever its command line says:
            # right after exec the kernel has not set it yet (an empty read), and a loaded box widened that
            # moment enough to call a booting broker dead ("exited during startup", 0.0 s after launch).
            return pid if started.poll() is None else None
        return pid if _is_ours(pid, self.marker) else None

    def start(self, argv: Sequence[str], log_file: Path, cwd: Path) -> int:
        """Start ``argv`` detached (own session), output to ``log_file``; write the pid file.

        The previous run's ``log_file`` is kept as ``<log_file>.1`` (one generation: appended
        to forever, a broker's log had grown to 335 MB).
        """
        log_file.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            log_file.replace(log_file.with_name(log_file.name + ".1"))
        with log_file.open("wb") as log:
            proc = subprocess.Popen(
                list(argv),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=cwd,
                start_new_session=True,
            )
        _STARTED[proc.pid] = proc
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        self.pid_file.write_text(str(proc.pid))
        return proc.pid

    def how_it_ended(self, pid: int) -> str:
        """How ``pid`` (started by :meth:`start` in this process) ended: ``exit code 1``,
        ``killed by SIGKILL`` (the kernel's OOM killer, or another process), or ``unknown``."""
        proc = _STARTED.get(pid)
        if proc is None:
            return "unknown"
        try:
            # A process being killed has lost its command line (so it is no longer ours) a moment
            # before the kernel lets its parent reap it: wait for that moment, not only poll.
            code = proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            return "unknown"
        if code < 0:
            with contextlib.suppress(ValueError):
                return f"killed by {signal.Signals(-code).name}"
            return f"killed by signal {-code}"
        return f"exit code {code}"

    def exited(self, pid: int) -> bool:
        """True once ``pid`` is gone (reaping it if it was our child)."""
        started = _STARTED.get(pid)
        if started is not None:  # reaped through its Popen, which keeps how it ended
            return started.poll() is not None
        with contextlib.suppress(ChildProcessError):
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done == pid:
                return True
        return not pid_alive(pid)

    def stop(self, timeout_s: float = 60.0) -> int | None:
        """SIGTERM our process, SIGKILL it after ``timeout_s``; wait until it exited.

        Returns the pid that was stopped, or ``None`` if nothing of ours ran.
        """
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return None
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while not self.exited(pid):
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                deadline = time.monotonic() + 10
            time.sleep(0.1)
        self.pid_file.unlink(missing_ok=True)
        _STARTED.pop(pid, None)
        return pid


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and has not exited (a zombie counts as exited)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    # A zombie has exited; only its exit status is left.
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _is_ours(pid: int, marker: str) -> bool:
    if not pid_alive(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return marker in cmdline


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True if nothing listens on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def require_free_port(service: str, port: int) -> None:
    """Raise ``ServiceError`` if ``port`` is taken by another process."""
    if not port_is_free(port):
        raise ServiceError(
            f"{service}: port {port} on 127.0.0.1 is taken by another process "
            f"(choose another with DISTILL_SERVICES__{service.upper()}_PORT)"
        )


def log_tail(path: Path, lines: int = 8) -> str:
    """The last ``lines`` lines of ``path`` joined with `` | `` (for one-line errors)."""
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    interesting = [ln.strip() for ln in text if ln.strip()][-lines:]
    return " | ".join(interesting)[-1500:]


@contextlib.contextmanager
def quiet_loggers(*names: str) -> Iterator[None]:
    """Silence client libraries while probing a service that is expected to refuse for a while."""
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)
