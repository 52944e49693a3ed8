"""Running a Faust app as a worker process (``distill worker``, ``distill replay``)."""

from __future__ import annotations

import faust
from faust.worker import Worker

from schemas.settings import Settings
from streams.logging_setup import logging_config, setup_logging
from streams.metrics import serve_metrics


def run_worker(app: faust.App, settings: Settings) -> None:
    """Block running ``app`` until it is stopped (SIGTERM/SIGINT)."""
    level = settings.worker.log_level
    setup_logging(level, settings.worker.log_json)
    serve_metrics(settings.worker.metrics_port)
    worker = Worker(
        app,
        loglevel=level,
        logging_config=logging_config(level, settings.worker.log_json),
        redirect_stdouts=False,
        quiet=True,
    )
    worker.execute_from_commandline()
