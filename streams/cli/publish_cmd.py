"""``distill publish FILE.jsonl``: validate every line, then send the valid records."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from schemas.settings import load_settings


@click.command("publish")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--dry-run", is_flag=True, help="Validate only; send nothing.")
@click.option("--allow-rejects", is_flag=True, help="Send the valid lines even when some lines are rejected.")
def command(path: Path, dry_run: bool, allow_rejects: bool) -> None:
    """Publish session events and commands from a JSON Lines file (one record per line).

    Every line is validated first; rejects are reported with their line numbers
    and nothing is sent unless --allow-rejects is given. Records are keyed by
    session (app_name/user_id/session_id), so each session stays in order.
    """
    from streams.app.decoding import Rejected, decode_event_record
    from streams.client import DistillClient

    settings = load_settings()
    records = []
    rejects = 0
    for number, line in enumerate(path.read_bytes().splitlines(), start=1):
        if not line.strip():
            continue
        decoded = decode_event_record(line, settings.kafka.max_record_bytes)
        if isinstance(decoded, Rejected):
            rejects += 1
            click.echo(f"{path}:{number}: rejected ({decoded.error_class}): {decoded.reason}", err=True)
        else:
            records.append(decoded)
    click.echo(f"{len(records)} valid, {rejects} rejected")
    if dry_run:
        if rejects:
            raise click.ClickException(f"{rejects} line(s) rejected (dry run: nothing sent)")
        return
    if rejects and not allow_rejects:
        raise click.ClickException("nothing sent (use --allow-rejects to send the valid lines)")

    async def send() -> int:
        async with DistillClient(settings) as client:
            return await client.publish_many(records)

    sent = asyncio.run(send())
    click.echo(f"sent {sent} records to {settings.topics.events}")
