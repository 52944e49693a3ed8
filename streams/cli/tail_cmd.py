"""``distill tail``: follow the summaries topic."""

from __future__ import annotations

import asyncio
import contextlib
import json

import click

from schemas.settings import load_settings


@click.command("tail")
@click.option("--session", "session", default=None, metavar="APP/USER/SESSION", help="Only this session.")
@click.option("--from-beginning", is_flag=True, help="Start at the oldest summary instead of now.")
@click.option("--json", "as_json", is_flag=True, help="Print each record as one JSON line.")
@click.option("--failures", is_flag=True, help="Also print failure answers of summarize_sync.")
def command(session: str | None, from_beginning: bool, as_json: bool, failures: bool) -> None:
    """Print summaries as they are published (Ctrl-C to stop)."""
    from schemas import SessionKey, SessionSummary
    from streams.client import DistillClient

    settings = load_settings()
    key = None
    if session:
        parts = session.split("/", 2)
        if len(parts) != 3:
            raise click.BadParameter("expected APP/USER/SESSION", param_hint="--session")
        key = SessionKey(*parts)

    async def follow() -> None:
        async with DistillClient(settings) as client:
            async for record in client.summaries(key, from_beginning=from_beginning, include_failures=failures):
                if as_json:
                    click.echo(json.dumps(record.model_dump(mode="json"), ensure_ascii=False))
                elif isinstance(record, SessionSummary):
                    click.echo(format_summary(record))
                else:
                    click.echo(f"[failure] {record.session_id} {record.filter_key or '(session)'}: {record.reason}")

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(follow())


def format_summary(s: object) -> str:
    """A readable block for one summary (also used by ``distill demo``)."""
    from schemas import SessionSummary

    assert isinstance(s, SessionSummary)
    st = s.stats
    head = (
        f"── {s.app_name}/{s.user_id}/{s.session_id} [{s.filter_key or 'full session'}] "
        f"{f'epoch {s.epoch} ' if s.epoch else ''}v{s.version} "
        f"(model {s.model}, prompt {s.prompt_version}, trigger {s.report.trigger.name}"
        f"{_trigger_value(s)})"
    )
    stats = (
        f"   events {st.original_event_count}→{st.compressed_event_count} ({st.compression_ratio:.0f}% saved), "
        f"tokens {st.original_tokens}→{st.summary_tokens} ({st.token_compression_ratio:.0f}% saved), "
        f"LLM in/out {st.input_tokens}/{st.output_tokens}, boundary {s.boundary.last_event_id}"
    )
    return f"{head}\n{stats}\n{s.summary}\n"


def _trigger_value(s: object) -> str:
    from schemas import SessionSummary

    assert isinstance(s, SessionSummary)
    t = s.report.trigger
    return f" {t.value:g}>{t.threshold:g} {t.unit}" if t.unit else ""
