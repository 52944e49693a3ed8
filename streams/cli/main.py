"""Entry point of the ``distill`` command: one click group, one module per command."""

from __future__ import annotations

import sys

import click

from streams.cli.errors import run_cli


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """distill: session summarization for LLM agents on Kafka, Faust and Cassandra."""


def _register() -> None:
    from streams.cli import init_cmd, schema_cmd, services_cmd

    for module in (services_cmd, init_cmd, schema_cmd):
        cli.add_command(module.command)


_register()


def main() -> None:
    """Console-script entry: errors of ours become one readable line and exit 1."""
    sys.exit(run_cli(cli))
