"""Turns distill's typed errors into one readable line at the command-line edge."""

from __future__ import annotations

import click

from streams.errors import DistillError


def run_cli(group: click.Group) -> int:
    """Run ``group``; a ``DistillError`` prints ``error: <reason>`` and returns 1."""
    try:
        group.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except DistillError as exc:
        click.echo(f"error: {exc}", err=True)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0
