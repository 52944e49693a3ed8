"""Names a test run created on the broker, deleted when the pytest session ends — or by the next run.

Fixtures and helpers that make per-test topics or worker app ids (consumer group,
changelog and assignor topics are named after it) register their prefix here; the
session fixture ``service_settings`` (tests/conftest.py) deletes every topic and
consumer group under them once all tests are done (workers stopped).

A run killed before its end (CI stopping a session, ^C twice) cannot do that. So each
test process also writes its prefixes, as it registers them, to a ledger file named
after its pid in the services' data directory; a later run deletes what the ledgers of
dead processes on the same broker name, then removes those ledgers (leftovers had piled
up to 2,931 partition logs, a broker that booted too slowly for CI). A ledger of a live
process (another test process, a concurrent run) is never touched.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from streams.services.process import pid_alive

REGISTERED: set[str] = set()
_ledger: Path | None = None


def register_prefix(prefix: str) -> str:
    """Delete topics and groups named ``prefix...`` at the end of the session; returns ``prefix``."""
    if not prefix:
        raise ValueError("an empty prefix would match every topic")
    if "\n" in prefix:
        raise ValueError("a prefix is one line")
    if prefix not in REGISTERED and _ledger is not None:
        with _ledger.open("a", encoding="utf-8") as f:
            f.write(prefix + "\n")
    REGISTERED.add(prefix)
    return prefix


def open_ledger(directory: Path, bootstrap: str, pid: int | None = None) -> Path:
    """Record this process's prefixes in ``directory/<pid>.ledger`` (its first line: the broker) from now on."""
    global _ledger
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{pid if pid is not None else os.getpid()}.ledger"
    path.write_text(bootstrap + "\n" + "".join(p + "\n" for p in sorted(REGISTERED)), encoding="utf-8")
    _ledger = path
    return path


def close_ledger() -> None:
    """Stop recording and remove this process's ledger (its prefixes were deleted)."""
    global _ledger
    if _ledger is not None:
        _ledger.unlink(missing_ok=True)
    _ledger = None


@dataclass(frozen=True)
class StaleLedger:
    """The ledger of a test process that is gone, and the prefixes it registered."""

    path: Path
    prefixes: tuple[str, ...]


def stale_ledgers(directory: Path, bootstrap: str) -> list[StaleLedger]:
    """The ledgers in ``directory`` of dead processes that used ``bootstrap``, oldest first."""
    out: list[StaleLedger] = []
    if not directory.is_dir():
        return out
    for path in sorted(directory.glob("*.ledger"), key=lambda p: p.stat().st_mtime):
        try:
            pid = int(path.stem)
            lines = path.read_text(encoding="utf-8").splitlines()
        except (ValueError, OSError):
            continue
        if not lines or lines[0] != bootstrap or pid_alive(pid):
            continue
        out.append(StaleLedger(path, tuple(p for p in lines[1:] if p)))
    return out


def sweep(directory: Path, bootstrap: str, delete: Callable[[list[str], str], bool]) -> list[StaleLedger]:
    """Delete what each stale ledger names (``delete(prefixes, label)``: whether it worked); remove those ledgers.

    A ledger whose deletion failed stays for the next run. Returns the ledgers removed.
    """
    removed: list[StaleLedger] = []
    for stale in stale_ledgers(directory, bootstrap):
        if not stale.prefixes or delete(list(stale.prefixes), f"left by {stale.path.name}"):
            stale.path.unlink(missing_ok=True)
            removed.append(stale)
    return removed
