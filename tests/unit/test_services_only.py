"""``LocalServices.up(only=...)``: starts and awaits just the named services (a private broker)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from schemas.settings import Settings
from streams.services.manager import LocalServices


@pytest.mark.parametrize(
    ("only", "expected"),
    [({"kafka"}, ["launch kafka", "await kafka"]), (None, ["launch kafka", "launch cassandra", "await kafka",
                                                          "await cassandra"])],
)  # fmt: skip
def test_up_touches_only_the_named_services(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, only: set[str] | None, expected: list[str]
) -> None:
    services = LocalServices(Settings(services={"data_dir": tmp_path}))
    calls: list[str] = []
    monkeypatch.setattr(services, "_launch_kafka", lambda say: calls.append("launch kafka") or True)
    monkeypatch.setattr(services, "_launch_cassandra", lambda say: calls.append("launch cassandra") or True)

    def wait(name: str, *args: Any) -> None:
        calls.append(f"await {name}")

    monkeypatch.setattr(services, "_await", wait)
    started = services.up(lambda line: None, only=only)
    assert calls == expected
    assert started == {name: True for name in ("kafka", "cassandra") if only is None or name in only}
