"""The worker's logging: the configured level holds for every logger after Faust's worker set logging up."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from schemas.settings import Settings
from streams.app.factory import create_app
from streams.app.worker import build_worker


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.parametrize("level", ["WARNING", "ERROR", "INFO"])
def test_no_library_builds_debug_records_below_the_configured_level(
    tmp_path: Any, restore_logging: None, level: str
) -> None:
    settings = Settings(services={"home": str(tmp_path)}, worker={"app_id": "distill-unit", "log_level": level})
    worker = build_worker(create_app(settings), settings)
    worker._setup_logging()  # what the worker does first when it runs
    assert logging.getLogger().level == logging.getLevelName(level)
    for name in ("openai._base_client", "httpcore.http11", "httpx", "streams.app.pool", "cassandra.cluster"):
        assert not logging.getLogger(name).isEnabledFor(logging.DEBUG), name
