"""Entry point of the ``distill`` command: one click group, one module per command."""

from __future__ import annotations

import sys

import click

from streams.cli.errors import run_cli


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """distill: session summarization for LLM agents on Kafka, Faust and Cassandra."""


def _register() -> None:
    """Add the ``command`` of every ``streams/cli/*_cmd.py`` module (one module per command)."""
    import importlib
    import pkgutil

    import streams.cli

    for info in sorted(pkgutil.iter_modules(streams.cli.__path__), key=lambda i: i.name):
        if info.name.endswith("_cmd"):
            module = importlib.import_module(f"streams.cli.{info.name}")
            cli.add_command(module.command)


_register()


def main() -> None:
    """Console-script entry: errors of ours become one readable line and exit 1."""
    sys.exit(run_cli(cli))
