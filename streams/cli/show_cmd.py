"""``distill show APP USER SESSION``: the summary of a session, its versions, boundary, stats and report."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime
from typing import Any

import click

from schemas import SessionKey
from schemas.settings import Settings, load_settings


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


async def _collect(settings: Settings, key: SessionKey, filter_key: str, with_epochs: bool) -> dict[str, Any]:
    from projections.epoch_reads import EpochReader
    from projections.read_api import SessionReader
    from streams.clients.cassandra_connection import cassandra_session

    with cassandra_session(settings.cassandra, settings.cassandra.keyspace) as session:
        reader = SessionReader(session, settings.cassandra.keyspace)
        epochs = EpochReader(session, settings.cassandra.keyspace, reader)
        chosen = await reader.get_summary(key, filter_key)
        served = await epochs.served_epoch(key)
        history = await reader.summary_history(key, chosen.filter_key if chosen else filter_key)
        stats = await reader.session_stats(key)
        pending = await reader.events_after_boundary(key, filter_key, summary=chosen, use_latest=chosen is not None)
        keys = [s.filter_key for s in await reader.list_summaries(key)]
        views = await epochs.epochs(key) if with_epochs else None
    record = chosen.record if chosen else None
    return {
        "session": key._asdict(),
        "requested_filter_key": filter_key,
        "served_epoch": served,
        "summary": None
        if chosen is None
        else {
            "filter_key": chosen.filter_key,
            "fallback": chosen.filter_key != filter_key,
            "epoch": chosen.epoch,
            "version": chosen.version,
            "text": chosen.summary,
            "boundary": {"cutoff_at": _iso(chosen.cutoff_at), "last_event_id": chosen.last_event_id},
            "created_at": _iso(chosen.created_at),
            "model": record.model if record else None,
            "stats": record.stats.model_dump() if record else None,
            "report": record.report.model_dump(mode="json") if record else None,
        },
        "versions": [
            {
                "epoch": h.epoch,
                "version": h.version,
                "cutoff_at": _iso(h.cutoff_at),
                "last_event_id": h.last_event_id,
                "created_at": _iso(h.created_at),
                "chars": len(h.summary),
            }
            for h in history
        ],
        "summary_keys": keys,
        "epochs": None if views is None else [_epoch_view(v) for v in views],
        "events": {
            **stats,
            "first_event_at": _iso(stats["first_event_at"]),
            "last_event_at": _iso(stats["last_event_at"]),
            "after_boundary": len(pending),
        },
    }


def _epoch_view(view: Any) -> dict[str, Any]:
    return {
        "epoch": view.epoch,
        "served": view.served,
        "versions": view.versions,
        "last_created_at": _iso(view.last_created_at),
        "adopted_at": _iso(view.adopted_at),
        "heads": [
            {"filter_key": h.filter_key, "version": h.version, "last_event_id": h.last_event_id,
             "cutoff_at": _iso(h.cutoff_at), "model": h.record.model, "prompt_version": h.record.prompt_version,
             "text": h.summary}
            for h in view.heads
        ],
    }  # fmt: skip


def _print_epochs(data: dict[str, Any]) -> None:
    click.echo("epochs:")
    for e in data["epochs"]:
        mark = "*" if e["served"] else " "
        switched = f", switched to {e['adopted_at']}" if e["adopted_at"] else ""
        click.echo(f" {mark} epoch {e['epoch']}: {e['versions']} versions, last {e['last_created_at']}{switched}")
        for h in e["heads"]:
            click.echo(
                f"      [{h['filter_key'] or 'full session'}] v{h['version']} at {h['last_event_id']}, "
                f"prompt {h['prompt_version']}: {h['text'][:80]}"
            )


def _print_human(data: dict[str, Any]) -> None:
    s = data["session"]
    click.echo(f"session {s['app_name']}/{s['user_id']}/{s['session_id']}")
    ev = data["events"]
    click.echo(
        f"events: {ev['events']} ({ev['tokens']} tokens, {ev['content_bytes']} bytes), "
        f"{ev['after_boundary']} after the boundary; first {ev['first_event_at']}, last {ev['last_event_at']}"
    )
    summary = data["summary"]
    if summary is None:
        click.echo("no summary")
        if data["epochs"] is not None:
            _print_epochs(data)
        return
    note = f" (fallback for {data['requested_filter_key']!r})" if summary["fallback"] else ""
    click.echo(
        f"summary [{summary['filter_key'] or 'full session'}] epoch {summary['epoch']} v{summary['version']}{note}, "
        f"model {summary['model']}"
    )
    b = summary["boundary"]
    click.echo(f"boundary: cutoff_at={b['cutoff_at']} last_event_id={b['last_event_id']}")
    click.echo("")
    click.echo(summary["text"])
    click.echo("")
    st = summary["stats"] or {}
    click.echo("stats: " + ", ".join(f"{k}={v}" for k, v in st.items()))
    report = summary["report"] or {}
    trig = report.get("trigger", {})
    click.echo(
        f"report: trigger {trig.get('name')} value={trig.get('value')} threshold={trig.get('threshold')} "
        f"{trig.get('unit', '')}; calls: "
        + "; ".join(
            f"{c['mode']} {c['model']} est={c['estimated_prompt_tokens']} outcome={c['outcome']}"
            for c in report.get("calls", [])
        )
    )
    click.echo("versions:")
    for v in data["versions"]:
        click.echo(
            f"  e{v['epoch']} v{v['version']}  cutoff {v['cutoff_at']}  last_event_id {v['last_event_id']}  "
            f"created {v['created_at']}  {v['chars']} chars"
        )
    if len(data["summary_keys"]) > 1:
        click.echo("other keys: " + ", ".join(repr(k) for k in data["summary_keys"] if k != summary["filter_key"]))
    if data["epochs"] is not None:
        _print_epochs(data)


@click.command("show")
@click.argument("app_name")
@click.argument("user_id")
@click.argument("session_id")
@click.option("--filter-key", default="", help="Branch key (default: the full session).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--epochs", "with_epochs", is_flag=True,
              help="Also list every summary epoch of the session (the served one marked *) and its latest "
                   "summaries; switch with 'distill epochs adopt'.")  # fmt: skip
def command(app_name: str, user_id: str, session_id: str, filter_key: str, as_json: bool, with_epochs: bool) -> None:
    """Print the summary of a session (with the guide's fallback), its version history, boundary, stats and report.

    The summary shown is of the epoch the session is served from; versions are
    listed by (epoch, version), newest first.
    """
    settings = load_settings()
    data = asyncio.run(_collect(settings, SessionKey(app_name, user_id, session_id), filter_key, with_epochs))
    if as_json:
        click.echo(json.dumps(data, indent=2, default=str))
    else:
        _print_human(data)
