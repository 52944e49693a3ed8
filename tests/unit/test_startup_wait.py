"""Booting the local services: time while the log grows (within a cap), one generation of logs kept."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from schemas.settings import Settings
from streams.errors import ServiceError
from streams.services.manager import SLOW_PARTITION_LOGS, LocalServices
from streams.services.process import ManagedProcess
from streams.services.startup_wait import StartupWait


def test_a_silent_boot_ends_after_the_stall_window() -> None:
    wait = StartupWait(stall_s=10, started_at=100.0)
    assert wait.give_up(100.0, 500) is None
    assert wait.give_up(109.0, 500) is None
    reason = wait.give_up(111.0, 500)
    assert reason == "not ready after 11 s, its log silent for 11 s"


def test_a_growing_log_extends_the_wait_past_the_stall_window() -> None:
    wait = StartupWait(stall_s=10, started_at=0.0, cap_factor=10)
    size = 0
    for now in range(0, 45, 5):  # a broker loading thousands of partition logs, logging all along
        size += 1000
        assert wait.give_up(float(now), size) is None, now
    # then it stops logging: the stall window counts from its last line
    assert wait.give_up(50.0, size) is None
    assert wait.give_up(51.0, size) == "not ready after 51 s, its log silent for 11 s"


def test_a_log_that_grows_forever_is_capped() -> None:
    wait = StartupWait(stall_s=10, started_at=0.0, cap_factor=3)
    for now in range(0, 31):
        assert wait.give_up(float(now), now * 100) is None, now
    assert wait.give_up(31.0, 3100) == "not ready after 31 s, 3× the start timeout of 10 s"


def test_what_the_log_holds_at_the_first_look_is_progress_then() -> None:
    # Cassandra is awaited after Kafka: its first look may come 200 s after its launch, its log grown all
    # along (the log starts empty at each launch). That is not 200 s of silence.
    wait = StartupWait(stall_s=180, started_at=0.0)
    assert wait.give_up(200.0, 10_000) is None
    assert wait.give_up(379.0, 10_000) is None
    assert wait.give_up(381.0, 10_000) == "not ready after 381 s, its log silent for 181 s"
    silent = StartupWait(stall_s=5, started_at=0.0)  # an empty log at the first look: silence from the launch
    assert silent.give_up(6.0, 0) == "not ready after 6 s, its log silent for 6 s"


def test_a_non_positive_window_is_refused() -> None:
    with pytest.raises(ValueError, match="stall_s must be positive"):
        StartupWait(stall_s=0, started_at=0.0)


def test_a_start_keeps_the_previous_runs_log_as_one_generation(tmp_path: Path) -> None:
    proc = ManagedProcess("echo", tmp_path / "echo.pid", str(tmp_path))
    log = tmp_path / "echo.out"
    for word in ("first", "second", "third"):
        pid = proc.start(["sh", "-c", f"echo {word}"], log, tmp_path)
        deadline = time.monotonic() + 10
        while not proc.exited(pid) and time.monotonic() < deadline:
            time.sleep(0.01)
    assert log.read_text() == "third\n"
    assert (tmp_path / "echo.out.1").read_text() == "second\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["echo.out", "echo.out.1", "echo.pid"]


def test_a_slow_broker_boot_names_the_partition_logs_it_loads(tmp_path: Path) -> None:
    services = LocalServices(Settings(services={"data_dir": tmp_path}))
    logs = tmp_path / "kafka" / "logs-data"
    logs.mkdir(parents=True)
    for i in range(SLOW_PARTITION_LOGS - 1):
        (logs / f"t-{i:04d}.events-0").mkdir()
    assert services._slow_start_hint("kafka") == ""
    (logs / "t-last.events-0").mkdir()
    hint = services._slow_start_hint("kafka")
    assert f"the broker loads {SLOW_PARTITION_LOGS} partition logs" in hint and "distill topics prune" in hint
    assert services._slow_start_hint("cassandra") == ""


@pytest.mark.parametrize(
    ("script", "ended"),
    [("exit 3", "exit code 3"), ("kill -KILL $$", "killed by SIGKILL"), ("kill -TERM $$", "killed by SIGTERM")],
)
def test_how_a_started_process_ended_is_told(tmp_path: Path, script: str, ended: str) -> None:
    proc = ManagedProcess("sh", tmp_path / "sh.pid", str(tmp_path))
    pid = proc.start(["sh", "-c", script], tmp_path / "sh.out", tmp_path)
    deadline = time.monotonic() + 10
    while not proc.exited(pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proc.how_it_ended(pid) == ended


def test_a_service_that_dies_at_startup_is_named_with_how_it_ended(tmp_path: Path) -> None:
    services = LocalServices(Settings(services={"data_dir": tmp_path}))
    pid = services.kafka.start(["sh", "-c", f"sleep 2; kill -KILL $$ # {services.kafka_dir}"],
                               services.kafka_dir / "kafka.out", tmp_path)  # fmt: skip
    assert services.kafka.pid() == pid
    with pytest.raises(
        ServiceError, match=r"kafka: the process exited during startup \(killed by SIGKILL, .*its log is empty"
    ):
        services._await("kafka", services.kafka, lambda: False, 30.0, print, time.monotonic())


def test_a_process_this_process_started_is_ours_while_unreaped_whatever_its_command_line_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import streams.services.process as process

    proc = ManagedProcess("kafka", tmp_path / "kafka.pid", str(tmp_path))
    pid = proc.start(["sh", "-c", f"sleep 30 # {tmp_path}"], tmp_path / "kafka.out", tmp_path)
    try:
        # Right after exec the kernel has not set the command line yet: a read finds it empty.
        monkeypatch.setattr(process, "_is_ours", lambda pid, marker: False)
        assert proc.pid() == pid
    finally:
        assert proc.stop(timeout_s=5) == pid
    assert proc.pid() is None
