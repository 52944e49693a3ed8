"""``distill demo``: services up, init, a worker and a projector, a realistic session, its summaries."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import time
from collections import defaultdict
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import click

from schemas.settings import Settings, load_settings
from streams.services.local_pipeline import LocalPipeline, distill_executable

DEMO_FILE = "demo_session.jsonl"


def load_demo_session(session_id: str) -> list[dict[str, Any]]:
    """The bundled session (46 events, 6 requests, 2 branches), under ``session_id``."""
    text = resources.files("streams.data").joinpath(DEMO_FILE).read_text(encoding="utf-8")
    records = [json.loads(line) for line in text.splitlines() if line.strip()]
    for record in records:
        record["session_id"] = session_id
    return records


@click.command("demo")
@click.option("--keep-running", is_flag=True, help="Leave the worker and projector running afterwards.")
@click.option("--timeout", default=120.0, show_default=True, help="Seconds to wait for the summaries.")
def command(keep_running: bool, timeout: float) -> None:
    """Run the whole pipeline on a bundled travel-agent session and print its summaries.

    Starts (or reuses) the local Kafka and Cassandra, creates topics and tables,
    starts one worker and one projector, publishes the session request by request
    (46 events: parallel tool calls, a large tool result, a research and an
    itinerary branch, an idle gap), asks for a synchronous summary of each
    branch when its sub-agent hands back and of the full session at the end,
    prints every summary with its stats, report and model, and ends with the
    address of the session's page in ``distill ui``.
    """
    from streams.cli.init_cmd import command as init_command
    from streams.services.manager import LocalServices

    settings = load_settings()
    click.echo("== services")
    LocalServices(settings).up(lambda line: click.echo(f"   {line}"))
    click.echo("== init")
    click.get_current_context().invoke(init_command, skip_kafka=False, skip_cassandra=False)
    workdir = Path(".distill") / "demo"
    with LocalPipeline(workdir, keep_running=keep_running) as pipeline:
        for name, proc in pipeline.procs.items():
            click.echo(f"== started {name} (pid {proc.pid}, log {pipeline.log(name)})")
        pipeline.wait_for_worker(timeout)
        key = asyncio.run(_run(settings, workdir, timeout))
    if not keep_running:
        click.echo("== stopped the worker and the projector")
    click.echo("   Kafka and Cassandra keep running: `distill services down` stops them.")
    click.echo("\n== browse it: start `distill ui` (read-only, localhost), then open")
    click.echo(f"   distill ui → {demo_url(key)}")


def demo_url(key: Any, port: int | None = None) -> str:
    """The ``distill ui`` page of the demo session (the default port unless ``port``)."""
    from urllib.parse import urlencode

    from streams.cli.ui_cmd import DEFAULT_PORT, browser_url

    query = urlencode({"app": key.app_name, "user": key.user_id, "id": key.session_id})
    return browser_url("127.0.0.1", port or DEFAULT_PORT, f"/session?{query}")


def branch_hand_backs(records: list[dict[str, Any]]) -> dict[str, str]:
    """``{event_id: filter_key}``: the last event of each branch (a sub-agent handing back to the planner)."""
    last: dict[str, str] = {}
    for raw in records:
        if raw.get("filter_key") and not raw.get("partial"):
            last[raw["filter_key"]] = raw["event_id"]
    return {event_id: filter_key for filter_key, event_id in last.items()}


async def publish_demo_session(
    client: Any, key: Any, records: list[dict[str, Any]], *, pause_s: float, timeout: float,
    echo: Callable[[str], None] = click.echo,
) -> None:  # fmt: skip
    """Publish the demo session as its agent runtime would, and ask for the summaries the demo shows.

    Request by request, ``pause_s`` apart (a user reading the answer). When a
    sub-agent hands back (the last event of its branch), a forced
    ``summarize_sync`` of that branch, answered before the planner goes on;
    after the last request a forced ``summarize_sync`` of the full session.
    With the triggers' defaults the research branch and the full session are
    also summarized on their own (the large search result, the idle gap): the
    session ends with summaries of three keys.
    """
    from streams.app.decoding import decode_event_record
    from streams.client import SummaryTimeoutError, SummaryUnavailableError

    hand_backs = branch_hand_backs(records)
    by_request: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for raw in records:
        by_request[raw["request_id"]].append(raw)

    async def summarize(filter_key: str) -> None:
        label = filter_key or "full session"
        try:
            reply = await client.request_summary(key, filter_key, wait=True, timeout=timeout, force=True)
            echo(f"   summarize_sync [{label}]: " + (f"version {reply.version}" if reply else "nothing new"))
        except (SummaryUnavailableError, SummaryTimeoutError) as exc:  # reported; the demo goes on to its end
            echo(f"   summarize_sync [{label}]: {exc}")

    echo(f"== publishing {len(records)} events of {key.kafka_key().decode()} in {len(by_request)} requests")
    for i, (request_id, raws) in enumerate(by_request.items()):
        if i:
            await asyncio.sleep(pause_s)
        chunk: list[Any] = []
        for raw in raws:
            chunk.append(decode_event_record(json.dumps(raw).encode(), 1 << 30))
            if raw["event_id"] in hand_backs:
                await client.publish_many(chunk)
                chunk = []
                await summarize(hand_backs[raw["event_id"]])
        await client.publish_many(chunk)
        echo(f"   {request_id}: {len(raws)} events")
    await summarize("")


async def _run(settings: Settings, workdir: Path, timeout: float) -> Any:
    """Publish the demo session, print its summaries and ``distill show``; returns its ``SessionKey``."""
    from schemas import SessionKey, SessionSummary
    from streams.cli.tail_cmd import format_summary
    from streams.client import DistillClient

    session_id = f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    records = load_demo_session(session_id)
    key = SessionKey(records[0]["app_name"], records[0]["user_id"], session_id)
    started = time.monotonic()
    async with DistillClient(settings) as client:
        follower = asyncio.ensure_future(_collect(client, key))
        await publish_demo_session(client, key, records, pause_s=1.5, timeout=timeout)
        await asyncio.sleep(2.0)
        follower.cancel()
        summaries: list[SessionSummary] = []
        with contextlib.suppress(asyncio.CancelledError):
            await follower
        summaries = _COLLECTED.get(key, [])
    elapsed = time.monotonic() - started
    click.echo(f"\n== {len(summaries)} summaries in {elapsed:.1f}s\n")
    for summary in summaries:
        click.echo(format_summary(summary))
    models = sorted({s.model for s in summaries})
    embedded = not settings.llm.configured
    click.echo(
        f"== produced by model(s): {', '.join(models) or '-'}"
        + (" — the embedded extractive summarizer (set DISTILL_LLM__API_KEY / DISTILL_LLM__BASE_URL for an LLM)"
           if embedded else "")
    )  # fmt: skip
    click.echo("\n== distill show (Cassandra read side)")
    await asyncio.sleep(2.0)
    shown = subprocess.run(
        [distill_executable(), "show", key.app_name, key.user_id, key.session_id],
        capture_output=True,
        text=True,
        check=False,
    )
    if shown.returncode == 0:
        click.echo(shown.stdout)
    else:
        last = (shown.stderr.strip().splitlines() or ["?"])[-1]
        click.echo(f"   read side not available yet ({last[:200]}); projector log: {workdir / 'projector.log'}")
    return key


_COLLECTED: dict[Any, list[Any]] = {}


async def _collect(client: Any, key: Any) -> None:
    from schemas import SessionSummary

    out: list[SessionSummary] = _COLLECTED.setdefault(key, [])
    async for record in client.summaries(key, from_beginning=True):
        if isinstance(record, SessionSummary):
            out.append(record)
            click.echo(f"   summary v{record.version} [{record.filter_key or 'full session'}] "
                       f"trigger={record.report.trigger.name} boundary={record.boundary.last_event_id}")  # fmt: skip
