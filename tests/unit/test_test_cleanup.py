"""The test runs' broker ledgers (tests/support/cleanup.py): what a killed run registered is deleted by the next."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import cleanup


@pytest.fixture()
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """The module's state of this test process put aside (a session fixture may hold a real ledger)."""
    monkeypatch.setattr(cleanup, "REGISTERED", set())
    monkeypatch.setattr(cleanup, "_ledger", None)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_ledger_records_each_prefix_once_and_closing_removes_it(tmp_path: Path, fresh: None) -> None:
    cleanup.register_prefix("t-before.")
    path = cleanup.open_ledger(tmp_path, "127.0.0.1:19092")
    for prefix in ("t-aaa.", "distill-test-bbb", "t-aaa."):
        cleanup.register_prefix(prefix)
    assert path.read_text().splitlines() == ["127.0.0.1:19092", "t-before.", "t-aaa.", "distill-test-bbb"]
    cleanup.close_ledger()
    assert not path.exists()
    with pytest.raises(ValueError, match="one line"):
        cleanup.register_prefix("t-\nx")


def test_only_the_ledgers_of_dead_processes_on_the_same_broker_are_stale(tmp_path: Path, fresh: None) -> None:
    dead = _dead_pid()
    (tmp_path / f"{dead}.ledger").write_text("127.0.0.1:19092\nt-dead.\ndistill-test-dead\n")
    cleanup.open_ledger(tmp_path, "127.0.0.1:19092")  # this live process's own
    cleanup.register_prefix("t-live.")
    (tmp_path / f"{_dead_pid()}.ledger").write_text("10.0.0.9:9092\nt-other-broker.\n")
    (tmp_path / "notapid.ledger").write_text("127.0.0.1:19092\nt-x.\n")
    [stale] = cleanup.stale_ledgers(tmp_path, "127.0.0.1:19092")
    assert stale.path.name == f"{dead}.ledger" and stale.prefixes == ("t-dead.", "distill-test-dead")
    assert cleanup.stale_ledgers(tmp_path / "missing", "127.0.0.1:19092") == []


def test_a_sweep_keeps_a_ledger_whose_deletion_failed(tmp_path: Path, fresh: None) -> None:
    ok, failing = _dead_pid(), _dead_pid()
    (tmp_path / f"{ok}.ledger").write_text("b:1\nt-ok.\n")
    (tmp_path / f"{failing}.ledger").write_text("b:1\nt-fail.\n")
    asked: list[list[str]] = []

    def delete(prefixes: list[str], label: str) -> bool:
        asked.append(prefixes)
        return prefixes != ["t-fail."]

    removed = cleanup.sweep(tmp_path, "b:1", delete)
    assert [r.prefixes for r in removed] == [("t-ok.",)]
    assert sorted(asked) == [["t-fail."], ["t-ok."]]
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{failing}.ledger"]
