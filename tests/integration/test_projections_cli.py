"""``distill show`` against a projected session."""

from __future__ import annotations

import asyncio
import json

import pytest
from click.testing import CliRunner

from schemas import SessionKey
from schemas.settings import Settings
from streams.cli.main import cli
from tests.integration.test_projections_support import close_store, event, open_store, summary

pytestmark = pytest.mark.integration


def test_show_prints_summary_versions_and_stats(pooled_settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(pooled_settings)
    key = SessionKey("app", "u", "s")
    try:

        async def fill() -> None:
            await store.events(event(key, "e1", at=1, content="hello there"), event(key, "e2", at=2))
            await store.summaries(
                summary(key, 1, text="first summary", cutoff=1, last_event_id="e1"),
                summary(key, 2, text="second summary", cutoff=2, last_event_id="e2", prev=(1, "e1")),
            )

        asyncio.run(fill())
        monkeypatch.setenv("DISTILL_CASSANDRA__KEYSPACE", pooled_settings.cassandra.keyspace)
        runner = CliRunner()
        out = runner.invoke(cli, ["show", "app", "u", "s", "--json"])
        assert out.exit_code == 0, out.output
        data = json.loads(out.output)
        assert data["summary"]["text"] == "second summary" and data["summary"]["version"] == 2
        assert [v["version"] for v in data["versions"]] == [2, 1]
        assert data["events"]["events"] == 2 and data["events"]["after_boundary"] == 0
        text = runner.invoke(cli, ["show", "app", "u", "s", "--filter-key", "app/x"]).output
        assert "second summary" in text and "fallback for 'app/x'" in text and "v1" in text
        assert "no summary" in runner.invoke(cli, ["show", "app", "u", "other"]).output
    finally:
        close_store(store)
