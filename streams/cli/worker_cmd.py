"""``distill worker``: run the track and summarize agents (any number of processes)."""

from __future__ import annotations

import click

from schemas.settings import load_settings


@click.command("worker")
@click.option(
    "--app",
    "app_spec",
    default=None,
    metavar="MODULE:CALLABLE",
    help="User hooks: a callable taking the settings and returning streams.app.extensions.Extensions.",
)
@click.option("--loglevel", "-l", default=None, help="Log level (default: DISTILL_WORKER__LOG_LEVEL).")
@click.option("--replay-run", default=None, hidden=True, help="Run as replay RUN (used by 'distill replay').")
@click.option("--replay-session", multiple=True, hidden=True)
@click.option("--replay-concurrency", type=click.IntRange(min=1), default=None, hidden=True)
@click.option("--replay-epoch", type=click.IntRange(min=1), default=None, hidden=True)
@click.option("--replay-exclude-file", type=click.Path(exists=True, dir_okay=False), default=None, hidden=True,
              help="JSON list of [app, user, session] the replay must not summarize.")  # fmt: skip
def command(
    app_spec: str | None,
    loglevel: str | None,
    replay_run: str | None,
    replay_session: tuple[str, ...],
    replay_concurrency: int | None,
    replay_epoch: int | None,
    replay_exclude_file: str | None,
) -> None:
    """Run a worker: the track agent (events → jobs), the summarize agent (jobs → summaries).

    Start as many as you like; partitions are shared among them. Metrics are
    served on DISTILL_WORKER__METRICS_PORT when set.
    """
    from streams.app.extensions import load_extensions
    from streams.app.factory import ReplayOptions, create_app
    from streams.app.worker import run_worker

    settings = load_settings()
    if loglevel:
        settings.worker.log_level = loglevel
    if replay_concurrency is not None:  # distill replay --llm-concurrency
        settings.summary.async_summary_num = replay_concurrency
    replay = None
    if replay_run:
        # A replay's workers run beside the live ones, often on the same host, and several at once:
        # fixed ports would collide. Metrics go to a free port; Faust's web view is off.
        settings.worker.web_port = 0
        if settings.worker.metrics_port is not None:
            settings.worker.metrics_port = 0
        from streams.cli.epochs_admin import read_excluded, run_epoch

        replay = ReplayOptions(
            replay_run,
            frozenset(replay_session),
            preload_from=settings.topics.summaries,
            epoch=replay_epoch or run_epoch(replay_run) or 0,
            excluded=read_excluded(replay_exclude_file) if replay_exclude_file else frozenset(),
        )
    app = create_app(settings, extensions=load_extensions(app_spec, settings), replay=replay)
    run_worker(app, settings)
