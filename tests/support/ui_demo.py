"""The session of ``distill demo``, summarized by the real worker and projected by the real projector.

``run_demo`` publishes the bundled session exactly as ``distill demo`` does
(``streams.cli.demo_cmd.publish_demo_session``: request by request, a forced
``summarize_sync`` of each branch when its sub-agent hands back, one of the
full session at the end) to a running ``distill worker`` whose model is
:class:`DemoModel` behind the scripted OpenAI-compatible server. What the
pages must show is then read off the summary records the worker published
(``DemoRun``), not written down beforehand.

:class:`DemoModel` is a scripted model with a known, lossy rule: it keeps
what the user asked for and the names of the tools called, in Chinese prose,
and drops everything the tools returned and the agents said. So the flight's
PNR ``X7Q2LM`` (a tool result and an agent's answer) is in no summary, and a
summary's versions differ inside a Chinese sentence (the message count, the
tool list): what the per-character diff must mark.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from schemas import SessionKey, SessionSummary
from schemas.settings import Settings
from tests.support.openai_server import Reply, answer, slow

HIDDEN_DETAIL = "X7Q2LM"
"""The flight's PNR: in a tool result and an agent's reply, never in a summary (``DemoModel`` drops both)."""
HOLD = "HOLD-THIS-CALL"
"""A request whose conversation contains this is answered only after ``HOLD_S`` (a job stays in flight)."""
HOLD_S = 600.0
PAUSE_S = 0.3
"""Between two requests (``distill demo`` waits 1.5 s; the scripted model answers at once)."""

_HEADER = re.compile(r"^对话摘要（共 (\d+) 条消息）：")
_SECTION = re.compile(r"(用户要求|已调用工具)：(.*?)。")
_MESSAGE = re.compile(r"^([a-z][\w-]*): (.*)$")
_TOOL_CALL = re.compile(r"^\[Called tool: ([\w.-]+) with args")


@dataclass(frozen=True)
class DemoDigest:
    """What :class:`DemoModel` keeps: a message count, the user's requests, the tools called (in order)."""

    messages: int
    requests: tuple[str, ...]
    tools: tuple[str, ...]

    def text(self) -> str:
        return (
            f"对话摘要（共 {self.messages} 条消息）：用户要求：{'；'.join(self.requests) or '无'}。"
            f"已调用工具：{'、'.join(self.tools) or '无'}。"
        )

    @classmethod
    def parse(cls, text: str) -> DemoDigest | None:
        """The digest a summary text holds (``None``: not written by ``DemoModel``)."""
        head = _HEADER.match(text.strip())
        if head is None:
            return None
        sections = dict(_SECTION.findall(text))

        def items(name: str, sep: str) -> tuple[str, ...]:
            value = sections.get(name, "无")
            return () if value == "无" else tuple(value.split(sep))

        return cls(int(head.group(1)), items("用户要求", "；"), items("已调用工具", "、"))


def _conversation(body: dict[str, Any]) -> list[tuple[str, str]]:
    """``(author, text)`` of each message line of the rendered conversation (the previous summary: ``system``)."""
    text = "\n".join(str(m.get("content") or "") for m in body.get("messages", []))
    inside = text.split("<conversation>", 1)[-1].split("</conversation>", 1)[0]
    return [(m.group(1), m.group(2)) for m in map(_MESSAGE.match, inside.splitlines()) if m]


def demo_summary(body: dict[str, Any]) -> str:
    """The summary :class:`DemoModel` writes for a summary request: the previous digest rolled forward."""
    previous = DemoDigest(0, (), ())
    messages = 0
    requests: list[str] = []
    tools: list[str] = []
    for author, text in _conversation(body):
        if author == "system":
            previous = DemoDigest.parse(text.removeprefix("summary: ")) or previous
            continue
        messages += 1
        call = _TOOL_CALL.match(text)
        if author == "user":
            requests.append(text.split(". ")[0].rstrip("."))
        elif call and call.group(1) not in tools and call.group(1) not in previous.tools:
            tools.append(call.group(1))
    return DemoDigest(
        previous.messages + messages, previous.requests + tuple(requests), previous.tools + tuple(tools)
    ).text()


class DemoModel:
    """The scripted model of the demo run (see the module doc); a request holding :data:`HOLD` hangs."""

    def __call__(self, body: dict[str, Any]) -> Reply:
        if any(HOLD in text for _, text in _conversation(body)):
            return slow(HOLD_S, "answered after the test")
        return answer(demo_summary(body))


@dataclass(frozen=True)
class DemoRun:
    """The demo session as published and the summaries the worker published for it (in topic order)."""

    key: SessionKey
    records: list[dict[str, Any]]
    summaries: list[SessionSummary]

    @property
    def complete_ids(self) -> list[str]:
        """The complete events, in session order (a partial one is stored, never summarized nor carried)."""
        return [r["event_id"] for r in self.records if not r.get("partial")]

    def record(self, event_id: str) -> dict[str, Any]:
        return next(r for r in self.records if r["event_id"] == event_id)

    def filter_key_of(self, event_id: str) -> str:
        return str(self.record(event_id)["filter_key"])

    def history(self, filter_key: str) -> list[SessionSummary]:
        """The versions of one key, oldest first."""
        return sorted((s for s in self.summaries if s.filter_key == filter_key), key=lambda s: s.version)

    def latest(self) -> dict[str, SessionSummary]:
        """The newest version of each key, by key."""
        return {s.filter_key: s for s in sorted(self.summaries, key=lambda s: (s.filter_key, s.version))}

    def containing(self, text: str) -> list[str]:
        """The complete events whose record holds ``text`` (in a message, a tool call or its result)."""
        return [r["event_id"] for r in self.records if not r.get("partial") and text in json.dumps(r["message"])]


async def run_demo(settings: Settings, session_id: str, echo: Callable[[str], None] = lambda line: None) -> DemoRun:
    """Publish the demo session as ``distill demo`` does; returns it with every summary the worker published."""
    from streams.cli.demo_cmd import load_demo_session, publish_demo_session
    from streams.client import DistillClient
    from tests.integration.pipeline_support import read_topic, summaries_of

    records = load_demo_session(session_id)
    key = SessionKey(records[0]["app_name"], records[0]["user_id"], session_id)
    async with DistillClient(settings) as client:
        await publish_demo_session(client, key, records, pause_s=PAUSE_S, timeout=60.0, echo=echo)
    # The last summarize_sync of each key was answered: every summary of the run is on the topic by now.
    published = summaries_of(await read_topic(settings, settings.topics.summaries, timeout=30.0))
    mine = [SessionSummary.model_validate(s) for s in published if s["session_id"] == session_id]
    return DemoRun(key, records, mine)


async def wait_projected(reader: Any, run: DemoRun, timeout: float = 30.0) -> None:
    """Until the read side holds every stored event and the latest version of every key of ``run``."""
    want = {k: s.version for k, s in run.latest().items()}
    deadline = time.monotonic() + timeout
    have: dict[str, int] = {}
    events = 0
    while time.monotonic() < deadline:
        have = {s.filter_key: s.version for s in await reader.list_summaries(run.key)}
        events = (await reader.session_stats(run.key))["events"]
        if have == want and events == len(run.records):
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"not projected within {timeout:.0f} s: summaries {have} (want {want}), events {events}")
