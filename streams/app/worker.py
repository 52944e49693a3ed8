"""Running a Faust app as a worker process (``distill worker``, ``distill replay``)."""

from __future__ import annotations

import faulthandler
import signal
from pathlib import Path

import faust
from faust.worker import Worker

from schemas.settings import Settings
from streams.app.gc_tuning import tune_gc
from streams.logging_setup import logging_config, setup_logging
from streams.metrics import serve_metrics


def run_worker(app: faust.App, settings: Settings) -> None:
    """Block running ``app`` until it is stopped (SIGTERM/SIGINT)."""
    prepare_data_dir(app)
    level = settings.worker.log_level
    setup_logging(level, settings.worker.log_json)
    serve_metrics(settings.worker.metrics_port)
    worker = build_worker(app, settings)
    tune_gc()
    # Faust prints the asyncio tasks on SIGUSR1, from Python on the event loop: a loop blocked in
    # a call that never returns cannot answer it. SIGQUIT dumps every thread's stack from C, as a
    # JVM does (mode's worker takes SIGUSR2 for a debugger prompt).
    faulthandler.register(signal.SIGQUIT, all_threads=True)
    worker.execute_from_commandline()


def build_worker(app: faust.App, settings: Settings) -> Worker:
    """Faust's worker for ``app``, logging at ``settings.worker.log_level`` (and nothing below it).

    Faust's worker draws a progress spinner by putting the root logger at DEBUG (a
    handler that spins on every record) whenever the level is WARNING or above, and
    leaves it there after startup: every ``debug`` call of every library (the OpenAI
    client and its HTTP stack log several per request) then built a record that the
    handlers threw away, ~5 % of a paced worker's CPU. No spinner here: the root logger
    keeps the configured level (and the log has no terminal escape codes).
    """
    level = settings.worker.log_level
    worker = Worker(
        app,
        loglevel=level,
        logging_config=logging_config(level, settings.worker.log_json),
        redirect_stdouts=False,
        quiet=True,
    )
    worker.spinner = None
    return worker


def prepare_data_dir(app: faust.App) -> None:
    """Create the parents of the app's Faust data directory (Faust itself makes only the last level)."""
    Path(app.conf.datadir).parent.mkdir(parents=True, exist_ok=True)
