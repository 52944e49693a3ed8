"""The worker settings the latency/CPU benchmarks vary, as command-line options (one definition for all)."""

from __future__ import annotations

import argparse

from schemas.settings import Settings


def add_worker_knobs(parser: argparse.ArgumentParser) -> None:
    """``--fetch-wait-ms``, ``--event-job-budget-ms``, ``--changelog-hold-ms`` (unset: the setting's default)."""
    parser.add_argument("--fetch-wait-ms", type=int, default=0,
                        help="the workers' worker.batch_fetch_wait_ms (0: the default)")  # fmt: skip
    parser.add_argument("--event-job-budget-ms", type=int, default=None,
                        help="worker.event_job_budget_ms (0: a fixed fetch wait; default: the default)")  # fmt: skip
    parser.add_argument("--changelog-hold-ms", type=int, default=None,
                        help="the workers' worker.changelog_hold_ms (default: the default)")  # fmt: skip


def apply_worker_knobs(settings: Settings, args: argparse.Namespace) -> None:
    """The options :func:`add_worker_knobs` defined, set on ``settings.worker`` where given."""
    if args.fetch_wait_ms:
        settings.worker.batch_fetch_wait_ms = args.fetch_wait_ms
    if args.event_job_budget_ms is not None:
        settings.worker.event_job_budget_ms = args.event_job_budget_ms
    if args.changelog_hold_ms is not None:
        settings.worker.changelog_hold_ms = args.changelog_hold_ms
