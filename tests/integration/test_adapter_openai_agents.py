"""The OpenAI Agents SDK on distill: ``DistillSession`` under the SDK's ``Runner``, real Kafka + Cassandra.

Runs ``examples/openai_agents_flow.py`` (the README snippet): ten conversations
through ``Runner.run`` with ``OpenAIChatCompletionsModel`` on an ``AsyncOpenAI``
client served by the scripted HTTP endpoint, the app summarizing every 3
conversations, then a question about the first turn answered with the recall tools.
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

pytest.importorskip("agents")
pytestmark = pytest.mark.integration
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "openai_agents_flow.py"
OLD_DETAIL = "三个月内做出一个数据分析项目"  # said in the first turn only


@pytest.mark.timeout(120)
def test_distill_session_under_the_agents_runner(service_settings: Settings) -> None:
    before = asyncio.run(delete_prefixed(service_settings.kafka, ["agents-flow-"], dry_run=True))
    result = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=110, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    # The run deletes its own topics and consumer groups (earlier, interrupted runs may have left some).
    after = asyncio.run(delete_prefixed(service_settings.kafka, ["agents-flow-"], dry_run=True))
    assert set(after.topics) <= set(before.topics) and set(after.groups) <= set(before.groups), after
    out = result.stdout

    turns = [(int(sent), int(full), bool(s)) for sent, full, s in
             re.findall(r"turn \d+: (\d+) messages sent \(full history (\d+)\)( with summary)?", out)]  # fmt: skip
    assert len(turns) == 10, out
    shrunk = [(sent, full) for sent, full, with_summary in turns if with_summary]
    assert shrunk and all(sent < full for sent, full in shrunk), out  # the prompt the SDK sends shrinks
    assert turns[-1][2] and turns[-1][0] < turns[-1][1] // 2, out  # by the end, to less than half
    summary = re.search(r"summary v(\d+): (\d+) events after it, (\d+) stored", out)
    assert summary and int(summary.group(1)) >= 2 and int(summary.group(2)) < int(summary.group(3)), out

    search = out.index("tool call session_search")
    load = out.index("tool call session_load")
    assert search < load
    answer = re.search(r"answer: (.*)", out[load:])
    assert answer and OLD_DETAIL in answer.group(1), out
