"""trpc-agent-py on distill: the guide's flow (one changed line) over real Kafka + Cassandra.

Runs ``examples/trpc_guide_flow.py`` (the README snippet): ten conversations
through trpc's Runner with ``DistillSessionService``, the guide's summarizer
triggers (every 3 conversations, keep 4) applied by the distill worker, the
guide's summary fields printed, then a recall turn with distill's tools.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path

import pytest

from schemas.settings import Settings
from streams.clients.topics_prune import delete_prefixed

pytest.importorskip("trpc_agent_sdk")
pytestmark = pytest.mark.integration
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "trpc_guide_flow.py"
OLD_DETAIL = "三个月内做出一个数据分析项目"  # said in the first turn only


@pytest.mark.timeout(120)
def test_the_guide_flow_runs_on_distill(service_settings: Settings) -> None:
    before = asyncio.run(delete_prefixed(service_settings.kafka, ["trpc-guide-"], dry_run=True))
    result = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=110, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    # The run deletes its own topics and consumer groups (earlier, interrupted runs may have left some).
    after = asyncio.run(delete_prefixed(service_settings.kafka, ["trpc-guide-"], dry_run=True))
    assert set(after.topics) <= set(before.topics) and set(after.groups) <= set(before.groups), after
    out = result.stdout

    ratios = [float(r) for r in re.findall(r"压缩比例: ([\d.]+)%", out)]
    assert ratios and ratios[-1] > 0, out  # the forced summary (create_session_summary(force=True)) compresses
    counts = re.findall(r"原始事件数: (\d+)\n.*压缩后事件数: (\d+)", out)
    assert counts and all(int(after) < int(before) for before, after in counts), out

    turns = [(int(sent), int(full), bool(s)) for sent, full, s in
             re.findall(r"turn \d+: (\d+) messages sent \(full history (\d+)\)( with summary)?", out)]  # fmt: skip
    assert len(turns) == 10, out
    shrunk = [(sent, full) for sent, full, with_summary in turns if with_summary]
    assert shrunk and all(sent < full for sent, full in shrunk), out  # the prompt trpc sends shrinks
    assert not any(with_summary for _, _, with_summary in turns[:3]), out  # nothing to summarize yet

    # the first turn's detail, long covered by summaries, comes back through search then load
    search = out.index("tool call session_search")
    load = out.index("tool call session_load")
    assert search < load
    answer = re.search(r"answer: (.*)", out[load:])
    assert answer and OLD_DETAIL in answer.group(1), out
