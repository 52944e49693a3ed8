"""The example agent loop runs end to end: events published, summaries injected, recall answered."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from schemas.settings import Settings

pytestmark = pytest.mark.integration
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agent_loop.py"


def test_example_agent_loop(service_settings: Settings) -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), "--pause", "2.5"], capture_output=True, text=True, timeout=280, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    versions = [int(v) for v in re.findall(r"summary v(\d+)\]", out)]
    assert versions and max(versions) >= 1, "no request carried a summary"
    saved = [(int(a), int(b)) for a, b in re.findall(r"~(\d+) tokens \(full history ~(\d+)\), summary v\d", out)]
    assert any(sent < full for sent, full in saved), "the summary never made a request smaller"
    assert "tool call session_search" in out
    assert "historical_context" in out  # the recall answer reached the model
    assert re.search(r"final summary v\d+ by distill-extractive-1", out)
