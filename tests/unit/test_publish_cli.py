"""``distill publish``: every line validated first, rejects reported with their line numbers."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from streams.cli.publish_cmd import command

GOOD = {
    "app_name": "a", "user_id": "u", "session_id": "s", "event_id": "e1",
    "timestamp": "2026-01-01T00:00:00Z", "author": "user", "message": {"role": "user", "content": "hi"},
}  # fmt: skip


def _file(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_dry_run_with_valid_lines_succeeds(tmp_path: Path) -> None:
    path = _file(tmp_path, [json.dumps(GOOD), json.dumps({**GOOD, "event_id": "e2"})])
    result = CliRunner().invoke(command, [str(path), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "2 valid, 0 rejected" in result.output


def test_rejects_are_reported_by_line_and_nothing_is_sent(tmp_path: Path) -> None:
    bad_role = {**GOOD, "message": {"role": "robot", "content": "x"}}
    path = _file(tmp_path, [json.dumps(GOOD), "{not json", json.dumps(bad_role)])
    result = CliRunner().invoke(command, [str(path), "--dry-run"])
    assert result.exit_code == 1
    assert f"{path}:2: rejected" in result.output
    assert f"{path}:3: rejected" in result.output and "message.role" in result.output
    assert "1 valid, 2 rejected" in result.output
    assert "dry run: nothing sent" in result.output
    # Without --dry-run the same file is refused before anything is sent (no Kafka needed to prove it).
    refused = CliRunner().invoke(command, [str(path)])
    assert refused.exit_code == 1 and "nothing sent" in refused.output
