"""``distill services``: lifecycle on separate ports and data directories, and its errors."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from schemas.settings import Settings, load_settings
from streams.errors import ServiceError
from streams.services.jars import corrupt_jars, resolve_classpath
from streams.services.manager import LocalServices

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISTILL_")}
    env.update(
        DISTILL_SERVICES__DATA_DIR=str(tmp_path / "data"),
        DISTILL_SERVICES__KAFKA_PORT=str(_free_port()),
        DISTILL_SERVICES__KAFKA_CONTROLLER_PORT=str(_free_port()),
        DISTILL_SERVICES__CASSANDRA_PORT=str(_free_port()),
        DISTILL_SERVICES__CASSANDRA_STORAGE_PORT=str(_free_port()),
    )
    env.update(extra)
    return env


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-c", "from streams.cli.main import main; main()", "services", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)


def _java_pids_with(marker: str) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if "java" in cmdline and marker in cmdline:
                pids.append(int(proc.name))
    return pids


def _cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"  # a zombie has exited


def test_up_status_down_leaves_no_java_process(tmp_path: Path) -> None:
    # Booting a second Kafka and Cassandra beside the suite's: C1 only takes about half the CPU.
    env = _env(tmp_path, DISTILL_SERVICES__JVM_OPTIONS='["-XX:TieredStopAtLevel=1"]')
    up = _cli(env, "up")
    assert up.returncode == 0, up.stderr
    assert "kafka: ready in" in up.stdout and "cassandra: ready in" in up.stdout
    again = _cli(env, "up")
    assert "reusing pid" in again.stdout
    status = json.loads(_cli(env, "status", "--json").stdout)
    assert {s["name"]: s["ready"] for s in status} == {"kafka": True, "cassandra": True}
    assert status[1]["version"].startswith("5.0.")
    pids = {s["pid"] for s in status}
    assert len(_java_pids_with(str(tmp_path))) == 2
    assert all("-XX:TieredStopAtLevel=1" in _cmdline(pid) for pid in pids)  # the extra JVM options reach both
    down = _cli(env, "down")
    assert down.returncode == 0, down.stderr
    assert _java_pids_with(str(tmp_path)) == []
    assert not any(_alive(pid) for pid in pids)
    assert "stopped" in _cli(env, "status").stdout


def test_missing_java_is_one_clear_line(tmp_path: Path) -> None:
    result = _cli(_env(tmp_path, DISTILL_SERVICES__JAVA="/nonexistent/java"), "up")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "error: '/nonexistent/java' not found on PATH: install Java 17 (apt-get install openjdk-17-jre-headless)"
    )


def test_port_taken_names_the_port(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        result = _cli(_env(tmp_path, DISTILL_SERVICES__KAFKA_PORT=str(port)), "up")
    assert result.returncode == 1
    assert f"kafka: port {port} on 127.0.0.1 is taken by another process" in result.stderr
    assert "Traceback" not in result.stderr
    assert _java_pids_with(str(tmp_path)) == []


def test_startup_timeout_reports_log_tail_and_stops_both_processes(tmp_path: Path) -> None:
    # Kafka is awaited first: its timeout ends the call while Cassandra still boots, so the
    # test takes seconds and also checks that the other JVM started by the call is stopped.
    env = _env(tmp_path, DISTILL_SERVICES__KAFKA_START_TIMEOUT_S="0.2")
    result = _cli(env, "up")
    assert result.returncode == 1
    line = result.stderr.strip()
    assert line.startswith("error: kafka: not ready after ") and "log tail:" in line
    assert "(raise DISTILL_SERVICES__KAFKA_START_TIMEOUT_S)" in line
    assert _java_pids_with(str(tmp_path)) == []


def test_corrupted_jar_cache_is_repaired_from_the_local_repository(tmp_path: Path) -> None:
    home = load_settings().services.home
    cached = resolve_classpath("kafka", home)
    copy_home = tmp_path / "home"
    shutil.copytree(cached, copy_home / "jars" / cached.name)
    victim = sorted((copy_home / "jars" / cached.name).glob("slf4j-reload4j-*.jar"))[0]
    intact = victim.read_bytes()
    victim.write_bytes(intact[:100])
    assert corrupt_jars(victim.parent) == [victim]
    # No Maven: the Maven local repository's intact copy is enough (the cache was copied from it).
    rebuilt = resolve_classpath("kafka", copy_home, mvn="/nonexistent/mvn")
    assert corrupt_jars(rebuilt) == []
    assert victim.read_bytes() == intact


def test_missing_maven_with_empty_cache_says_so(tmp_path: Path) -> None:
    settings = Settings(services={"home": tmp_path / "home", "mvn": "/nonexistent/mvn"})
    with pytest.raises(ServiceError, match="'/nonexistent/mvn' not found on PATH: install Maven"):
        resolve_classpath("cassandra", settings.services.home, settings.services.mvn)
    assert LocalServices(settings).status()[0].running is False


def test_failed_download_names_the_artifact(tmp_path: Path) -> None:
    pom = (Path(__file__).parents[2] / "services" / "kafka" / "pom.xml").read_text()
    broken = pom.replace("<artifactId>kafka_2.13</artifactId>", "<artifactId>no-such-kafka-artifact</artifactId>")
    (tmp_path / "recipes" / "kafka").mkdir(parents=True)
    (tmp_path / "recipes" / "kafka" / "pom.xml").write_text(broken)
    with pytest.raises(ServiceError, match=r"downloading jars for kafka failed: .*no-such-kafka-artifact"):
        resolve_classpath("kafka", tmp_path / "home", pom_root=tmp_path / "recipes")
