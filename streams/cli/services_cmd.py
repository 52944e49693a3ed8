"""``distill services up|down|status``: local Kafka and Cassandra without Docker."""

from __future__ import annotations

import json
from pathlib import Path

import click

from schemas.settings import load_settings
from streams.services.manager import LocalServices, status_dicts


def _services() -> LocalServices:
    return LocalServices(load_settings())


@click.group("services")
def command() -> None:
    """Start, stop and inspect the local Kafka and Cassandra JVM processes."""


@command.command("up")
@click.option(
    "--owner-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Record which services this call started (for a later `down --owner-file`).",
)
def up(owner_file: Path | None) -> None:
    """Start Kafka and Cassandra (or reuse running ones) and wait until both answer."""
    started = _services().up(click.echo)
    if owner_file is not None:
        owner_file.parent.mkdir(parents=True, exist_ok=True)
        owner_file.write_text(json.dumps(sorted(name for name, now in started.items() if now)))


@command.command("down")
@click.option(
    "--owner-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Stop only the services listed in this file by `up --owner-file`, then delete it.",
)
def down(owner_file: Path | None) -> None:
    """Stop the Kafka and Cassandra processes that `up` started."""
    only = None
    if owner_file is not None:
        only = set(json.loads(owner_file.read_text())) if owner_file.exists() else set()
        owner_file.unlink(missing_ok=True)
    _services().down(click.echo, only=only)


@command.command("status")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(as_json: bool) -> None:
    """Say what runs where: addresses, pids, versions, data directory."""
    rows = _services().status()
    if as_json:
        click.echo(json.dumps(status_dicts(rows), indent=2))
        return
    for s in rows:
        state = "ready" if s.ready else ("running, not answering" if s.running else "stopped")
        pid = f"pid {s.pid}" if s.pid else "no pid"
        click.echo(f"{s.name:<10} {state:<24} {s.address:<18} {pid:<10} v{s.version}  {s.data_dir}")
