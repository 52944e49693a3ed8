"""A private single-node Kafka for one test: its own data directory and free ports.

Tests that restart the broker must not restart the shared one other tests use.
``distill services`` code starts this one (``LocalServices.up(only={"kafka"})``)
with a data directory under the test's tmp path; its pid file there is the only
handle used to stop it, so nothing else is ever signalled. Boots in about 5 s.

    with private_kafka(service_settings, tmp_path / "kafka") as broker:
        settings = broker.settings          # kafka.bootstrap_servers points at it
        broker.restart()                    # stop (SIGTERM, pid file) and start again, same port
"""

from __future__ import annotations

import shutil
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from schemas.settings import Settings
from streams.errors import ServiceError
from streams.services.manager import LocalServices


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class PrivateKafka:
    """The broker of ``services`` (started by :func:`private_kafka`)."""

    settings: Settings
    services: LocalServices
    log: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int | None:
        return self.services.kafka.pid()

    def start(self) -> float:
        """Start the broker and wait until it answers metadata; returns the seconds it took.

        The readiness probe runs its own event loop, so it runs in a thread of its own:
        callable from inside a running loop (an async test) as well. A broker that dies
        while it boots is started once more (CI saw one die silently in its first second,
        an empty log; the error now says how it ended): the boot is not what these tests
        test, and a second death fails the test with both errors.
        """
        t0 = time.monotonic()
        for attempt in (1, 2):
            try:
                with ThreadPoolExecutor(1) as pool:
                    pool.submit(self.services.up, self.log.append, only={"kafka"}).result()
                break
            except ServiceError as exc:
                if attempt == 2 or "exited during startup" not in str(exc):
                    raise ServiceError(f"{exc} (earlier: {'; '.join(self.log)})") from exc
                self.log.append(f"boot {attempt} failed: {exc}")
                print(f"private kafka: {exc}; starting it again")
        return time.monotonic() - t0

    def stop(self) -> None:
        """Stop exactly our broker (the pid in our data directory's pid file)."""
        self.services.down(self.log.append, only={"kafka"})

    def restart(self) -> float:
        """Stop and start again on the same ports and data; returns the seconds it was away."""
        t0 = time.monotonic()
        self.stop()
        self.start()
        return time.monotonic() - t0


@contextmanager
def private_kafka(base: Settings, data_dir: Path) -> Iterator[PrivateKafka]:
    """``base`` with a private broker as its Kafka; the broker and its data are removed afterwards."""
    data = base.model_dump()
    port, controller = free_port(), free_port()
    data["services"].update(data_dir=data_dir, kafka_port=port, kafka_controller_port=controller)
    data["kafka"]["bootstrap_servers"] = f"127.0.0.1:{port}"
    data["llm"]["api_key"] = base.llm.api_key
    settings = Settings(**data)
    broker = PrivateKafka(settings, LocalServices(settings))
    try:
        broker.start()
        yield broker
    finally:
        broker.stop()
        shutil.rmtree(data_dir / "kafka", ignore_errors=True)
