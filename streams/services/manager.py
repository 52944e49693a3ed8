"""``distill services up | down | status``: the two local services, by pid file."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from schemas.settings import Settings
from streams.errors import ServiceError
from streams.services import cassandra, kafka
from streams.services.jars import resolve_classpath
from streams.services.java import require_java
from streams.services.process import ManagedProcess, log_tail, require_free_port
from streams.services.startup_wait import StartupWait

SLOW_PARTITION_LOGS = 1000
"""A broker's data directory with this many partition logs takes a minute or more to load."""


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


Say = Callable[[str], None]


@dataclass(frozen=True)
class ServiceStatus:
    """What ``status`` reports for one service."""

    name: str
    running: bool
    ready: bool
    pid: int | None
    address: str
    version: str
    data_dir: str
    log_file: str


class LocalServices:
    """Starts, stops and inspects the local Kafka and Cassandra of one data directory."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.services = settings.services
        self.data_dir = self.services.resolved_data_dir.resolve()
        self.kafka_dir = self.data_dir / "kafka"
        self.cassandra_dir = self.data_dir / "cassandra"
        self.kafka = ManagedProcess("kafka", self.kafka_dir / "kafka.pid", str(self.kafka_dir))
        self.cassandra = ManagedProcess("cassandra", self.cassandra_dir / "cassandra.pid", str(self.cassandra_dir))

    @property
    def kafka_address(self) -> str:
        return f"127.0.0.1:{self.services.kafka_port}"

    @property
    def cassandra_address(self) -> str:
        return f"127.0.0.1:{self.services.cassandra_port}"

    # -- up -------------------------------------------------------------------------------------

    def up(self, say: Say, only: set[str] | None = None) -> dict[str, bool]:
        """Start what is not running (both JVMs boot in parallel), wait until both answer.

        ``only`` limits the call to these services (``{"kafka"}``: a private broker of
        this data directory, as the end-to-end oracle test restarts). Returns
        ``{service: started_now}``. On failure the processes started by this call
        are stopped again and ``ServiceError`` names the cause.
        """
        started: dict[str, bool] = {}
        wanted = {"kafka", "cassandra"} if only is None else only
        try:
            if "kafka" in wanted:
                started["kafka"] = self._launch_kafka(say)
            kafka_t0 = time.monotonic()
            if "cassandra" in wanted:
                started["cassandra"] = self._launch_cassandra(say)
            cassandra_t0 = time.monotonic()
            if "kafka" in wanted:
                timeout = self.services.kafka_start_timeout_s
                self._await("kafka", self.kafka, self._kafka_ready, timeout, say, kafka_t0)
            if "cassandra" in wanted:
                timeout = self.services.cassandra_start_timeout_s
                self._await("cassandra", self.cassandra, self._cassandra_ready, timeout, say, cassandra_t0)
        except BaseException:
            for name, now in started.items():
                if now:
                    (self.kafka if name == "kafka" else self.cassandra).stop()
            raise
        return started

    def _launch_kafka(self, say: Say) -> bool:
        if self.kafka.pid() is not None:
            say(f"kafka: reusing pid {self.kafka.pid()} on {self.kafka_address}")
            return False
        require_java(self.services.java, 17, 23, "kafka")
        require_free_port("kafka", self.services.kafka_port)
        require_free_port("kafka_controller", self.services.kafka_controller_port)
        jars = resolve_classpath("kafka", self.services.home, self.services.mvn, self.kafka_dir / "mvn.log")
        d = self.kafka_dir
        d.mkdir(parents=True, exist_ok=True)
        props = kafka.server_properties(self.services, d, self.settings.kafka.max_record_bytes)
        (d / "server.properties").write_text(props)
        (d / "log4j.properties").write_text(kafka.LOG4J_PROPERTIES)
        if not (d / "logs-data" / "meta.properties").exists():
            self._format_kafka_storage(jars)
        pid = self.kafka.start(
            self._with_options(kafka.jvm_command(self.services.java, jars, d, self.services.kafka_heap_mb,
                                                 ["kafka.Kafka", str(d / "server.properties")])),
            d / "kafka.out", d,
        )  # fmt: skip
        say(f"kafka: started pid {pid} (Kafka {kafka.KAFKA_VERSION}) on {self.kafka_address}")
        return True

    def _format_kafka_storage(self, jars: Path) -> None:
        import subprocess

        d = self.kafka_dir
        cmd = kafka.jvm_command(
            self.services.java, jars, d, 256,
            ["kafka.tools.StorageTool", "format", "-t", kafka.new_cluster_id(),
             "-c", str(d / "server.properties"), "--ignore-formatted"],
        )  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=d)
        if proc.returncode != 0:
            tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-3:])
            raise ServiceError(f"kafka: formatting the storage directory failed: {tail}")

    def _launch_cassandra(self, say: Say) -> bool:
        if self.cassandra.pid() is not None:
            say(f"cassandra: reusing pid {self.cassandra.pid()} on {self.cassandra_address}")
            return False
        require_java(self.services.java, 17, 17, "cassandra")
        require_free_port("cassandra", self.services.cassandra_port)
        require_free_port("cassandra_storage", self.services.cassandra_storage_port)
        jars = resolve_classpath("cassandra", self.services.home, self.services.mvn, self.cassandra_dir / "mvn.log")
        d = self.cassandra_dir
        (d / "logs").mkdir(parents=True, exist_ok=True)
        (d / "cassandra.yaml").write_text(cassandra.cassandra_yaml(self.services, d))
        (d / "logback.xml").write_text(cassandra.LOGBACK_XML)
        pid = self.cassandra.start(
            self._with_options(cassandra.jvm_command(self.services.java, jars, d, self.services.cassandra_heap_mb)),
            d / "cassandra.out", d,
        )  # fmt: skip
        say(f"cassandra: started pid {pid} (Cassandra {cassandra.CASSANDRA_VERSION}) on {self.cassandra_address}")
        return True

    def _with_options(self, command: list[str]) -> list[str]:
        """``command`` (``java …``) with the configured extra JVM options right after ``java``."""
        return [command[0], *self.services.jvm_options, *command[1:]]

    def _await(
        self, name: str, proc: ManagedProcess, ready: Callable[[], bool], timeout_s: float, say: Say, t0: float
    ) -> None:
        log = proc.pid_file.parent / f"{name}.out"
        wait = StartupWait(timeout_s, t0)
        launched = proc.pid()
        while not ready():
            pid = proc.pid()
            if pid is None:
                ended = "unknown" if launched is None else proc.how_it_ended(launched)
                raise ServiceError(
                    f"{name}: the process exited during startup ({ended}, "
                    f"{time.monotonic() - t0:.1f} s after launch): {log_tail(log) or '(its log is empty)'}"
                )
            reason = wait.give_up(time.monotonic(), _size(log))
            if reason is not None:
                raise ServiceError(
                    f"{name}: {reason} (raise DISTILL_SERVICES__{name.upper()}_START_TIMEOUT_S)"
                    f"{self._slow_start_hint(name)}; log tail: {log_tail(log)}"
                )
            time.sleep(0.5)
        say(f"{name}: ready in {time.monotonic() - t0:.1f} s after launch")

    def _slow_start_hint(self, name: str) -> str:
        """What may slow the boot down: for the broker, the partition logs it loads."""
        if name != "kafka":
            return ""
        try:
            logs = sum(1 for _ in (self.kafka_dir / "logs-data").iterdir())
        except OSError:
            return ""
        if logs < SLOW_PARTITION_LOGS:
            return ""
        return (
            f"; the broker loads {logs} partition logs: `distill topics prune --prefix t- --prefix "
            f"distill-test- ...` deletes what test and benchmark runs left"
        )

    def _kafka_ready(self) -> bool:
        return kafka.answers_metadata(self.kafka_address, timeout_s=3.0)

    def _cassandra_ready(self) -> bool:
        return cassandra.release_version("127.0.0.1", self.services.cassandra_port, 3.0) is not None

    # -- down / status ----------------------------------------------------------------------------

    def down(self, say: Say, only: set[str] | None = None) -> None:
        """Stop exactly the pids in our pid files (``only`` these services) and wait until they exited."""
        for name, proc in (("kafka", self.kafka), ("cassandra", self.cassandra)):
            if only is not None and name not in only:
                say(f"{name}: left running (not started by this run)")
                continue
            pid = proc.stop()
            say(f"{name}: stopped pid {pid}" if pid else f"{name}: not running")

    def status(self) -> list[ServiceStatus]:
        """Both services: pid, address, whether they answer, version and data directory."""
        kpid, cpid = self.kafka.pid(), self.cassandra.pid()
        version = cassandra.release_version("127.0.0.1", self.services.cassandra_port, 3.0) if cpid else None
        return [
            ServiceStatus(
                "kafka", kpid is not None, bool(kpid) and self._kafka_ready(), kpid, self.kafka_address,
                kafka.KAFKA_VERSION, str(self.kafka_dir), str(self.kafka_dir / "kafka.out"),
            ),
            ServiceStatus(
                "cassandra", cpid is not None, version is not None, cpid, self.cassandra_address,
                version or cassandra.CASSANDRA_VERSION, str(self.cassandra_dir),
                str(self.cassandra_dir / "cassandra.out"),
            ),
        ]  # fmt: skip


def status_dicts(statuses: list[ServiceStatus]) -> list[dict[str, object]]:
    """JSON-ready form of :meth:`LocalServices.status`."""
    return [asdict(s) for s in statuses]
