"""``distill topics prune``: delete the topics and consumer groups of test and benchmark runs."""

from __future__ import annotations

import asyncio

import click

from schemas.settings import load_settings


@click.group("topics")
def command() -> None:
    """Kafka topic housekeeping."""


@command.command("prune")
@click.option(
    "--prefix",
    "prefixes",
    multiple=True,
    required=True,
    help="Delete topics and consumer groups whose name starts with this (repeatable): t- bench- distill-test-",
)
@click.option("--dry-run", is_flag=True, help="Only list what would be deleted.")
def prune_command(prefixes: tuple[str, ...], dry_run: bool) -> None:
    """Delete every topic and consumer group named PREFIX... (refuses a prefix of the live names)."""
    from streams.clients.topics_prune import prune

    pruned = asyncio.run(prune(load_settings(), prefixes, dry_run=dry_run))
    verb = "would delete" if dry_run else "deleted"
    for topic in pruned.topics:
        click.echo(f"{verb} topic {topic}")
    for group in pruned.groups:
        click.echo(f"{verb} group {group}")
    for name, error in pruned.failed.items():
        click.echo(f"could not delete group {name}: {error}", err=True)
    click.echo(f"{verb} {len(pruned.topics)} topics, {len(pruned.groups)} consumer groups")
