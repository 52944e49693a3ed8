"""How ``distill demo`` publishes its session, on a real broker with no worker running (nothing answers).

Each branch's ``summarize_sync`` sits right after the branch's last event (the
sub-agent's hand-back), the full session's after the last event; a sync that
gets no answer is reported and the demo goes on (to the ``distill ui`` address
it ends with) rather than stopping with a traceback.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from schemas import SessionKey
from schemas.settings import Settings
from tests.integration.pipeline_support import create_topics, read_topic

pytestmark = pytest.mark.integration


def test_the_demo_asks_for_each_branch_at_its_hand_back_and_goes_on_without_answers(
    isolated_settings: Settings,
) -> None:
    from streams.cli.demo_cmd import load_demo_session, publish_demo_session
    from streams.client import DistillClient

    settings = isolated_settings
    records = load_demo_session("demo-publish")
    key = SessionKey(records[0]["app_name"], records[0]["user_id"], "demo-publish")
    lines: list[str] = []

    async def run() -> list[dict[str, object]]:
        await create_topics(settings)
        async with DistillClient(settings) as client:
            await publish_demo_session(client, key, records, pause_s=0.0, timeout=0.5, echo=lines.append)
        return [
            json.loads(r.value)
            for r in await read_topic(settings, settings.topics.events, min_records=len(records) + 3)
        ]

    published = asyncio.run(run())
    order = [r["event_id"] if r["type"] == "event" else f"{r['type']}:{r['filter_key']}" for r in published]
    last = {fk: max(i for i, r in enumerate(records) if r["filter_key"] == fk and not r.get("partial"))
            for fk in {r["filter_key"] for r in records if r["filter_key"]}}  # fmt: skip
    expected: list[str] = []
    for i, r in enumerate(records):
        expected.append(r["event_id"])
        expected += [f"summarize_sync:{fk}" for fk, at in last.items() if at == i]
    assert order == [*expected, "summarize_sync:"]
    assert all(r["force"] for r in published if r["type"] == "summarize_sync")
    syncs = [line for line in lines if line.startswith("   summarize_sync")]
    assert len(syncs) == 3 and all("no answer" in line for line in syncs), syncs
    assert syncs[-1].startswith("   summarize_sync [full session]")
