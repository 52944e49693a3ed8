"""A seeded generator of agent sessions for the context-read equivalence test, and its in-memory oracle.

A session is a list of steps in log order: events (runs of a user message,
tool rounds with parallel calls, late results delivered runs later, partial
chunks, sub-agent events on child keys, skip_summarization flags,
same-timestamp ties, late events stamped before events logged before them,
CJK text) and summaries of random keys landing at random points with a
boundary inside that key's summary input (by event id, or by timestamp only).
Check points say where an agent builds its next request.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from schemas import SessionEvent, SessionSummary

T0 = datetime(2026, 2, 1, 8, 0, 0, tzinfo=UTC)
KEYS = ("", "app", "app/a", "app/a/x", "app/b")
TEXTS = ("天气怎么样？", "查一下航班", "hello there", "请总结一下", "résumé of the plan", "東京の天気")


def in_summary_input(event_key: str, target: str) -> bool:
    """The oracle's own statement of a key's summary input: whatever a prompt on ``target`` shows
    (keyless events, and keys on its line of ancestry: ancestors, itself, descendants)."""
    if target == "" or event_key == "":
        return True
    return (event_key + "/").startswith(target + "/") or (target + "/").startswith(event_key + "/")


def applicable(latest: dict[str, SessionSummary], filter_key: str) -> SessionSummary | None:
    """The oracle's rule: the key's own summary, else the nearest ancestor's, else the full session's."""
    chain = [filter_key]
    key = filter_key
    while key:
        key = key.rpartition("/")[0]
        chain.append(key)
    for k in chain:
        s = latest.get(k)
        if s is not None and s.summary.strip():
            return s
    return None


@dataclass
class Generated:
    session_id: str
    steps: list[SessionEvent | SessionSummary] = field(default_factory=list)
    checks: list[int] = field(default_factory=list)
    """Step counts after which an agent reads (the prefix ``steps[:n]`` is projected)."""


class _Builder:
    def __init__(self, rng: random.Random, session_id: str, reuse_call_ids: bool = False) -> None:
        self.rng = rng
        self.reuse_call_ids = reuse_call_ids
        self.g = Generated(session_id)
        self.events: list[SessionEvent] = []
        self.micros = 0
        self.versions: dict[str, int] = {}
        self.boundaries: dict[str, int] = {}
        self.pending: list[tuple[str, str, str, str]] = []  # late results: (call id, key, invocation, request)
        self.calls = 0

    def _ts(self) -> datetime:
        draw = self.rng.random()
        if self.events and draw < 0.12:
            return self.events[-1].timestamp  # a same-timestamp sibling
        if self.events and draw < 0.2:
            # A late event: stamped before events logged before it (a producer's clock behind, a sub-agent
            # flushing late), sometimes before a summary's cutoff; the clock does not move back.
            return T0 + timedelta(microseconds=max(0, self.micros - self.rng.choice((1, 1000, 2500, 40_000, 200_000))))
        self.micros += self.rng.choice((1, 999, 1000, 1500, 40_000))
        return T0 + timedelta(microseconds=self.micros)

    def next_id(self) -> str:
        return f"{self.g.session_id}-e{len(self.events) + 1}"

    def event(self, role: str, key: str, inv: str, req: str, **message: Any) -> SessionEvent:
        extra: dict[str, Any] = message.pop("extra", {})
        ev = SessionEvent(
            app_name="app", user_id="u", session_id=self.g.session_id,
            event_id=self.next_id(), timestamp=self._ts(), invocation_id=inv,
            request_id=req, author="user" if role == "user" else "agent", filter_key=key,
            message={"role": role, **message}, skip_summarization=self.rng.random() < 0.08, **extra,
        )  # fmt: skip
        self.events.append(ev)
        self.g.steps.append(ev)
        return ev

    def maybe_summary(self) -> None:
        if not self.events or self.rng.random() > 0.15:
            return
        key = self.rng.choice(KEYS)
        start = self.boundaries.get(key, -1) + 1
        candidates = [i for i in range(start, len(self.events)) if in_summary_input(self.events[i].filter_key, key)]
        if not candidates:
            return
        i = self.rng.choice(candidates)
        self.boundaries[key] = i
        version = self.versions[key] = self.versions.get(key, 0) + 1
        target = self.events[i]
        blank = self.rng.random() < 0.05
        s = SessionSummary(
            app_name="app", user_id="u", session_id=self.g.session_id, filter_key=key,
            summary="" if blank else f"summary of {key or 'session'} v{version} 摘要", version=version,
            previous_version=version - 1 if version > 1 else None,
            boundary={"cutoff_at": target.timestamp,
                      "last_event_id": None if self.rng.random() < 0.25 else target.event_id},
            model="m", prompt_version="p", created_at=T0, report={"trigger": {"name": "manual"}},
            job_id=f"{self.g.session_id}-{key}-{version}",
        )  # fmt: skip
        self.g.steps.append(s)

    def run(self, n: int) -> None:
        rng = self.rng
        key = rng.choice(KEYS)
        inv, req = f"inv{n}", f"req{n}"
        user_key = key if rng.random() < 0.6 else ""
        if rng.random() < 0.04:
            self.event("user", user_key, inv, req, content="", extra={"error": {"type": "x", "message": "bad 输入"}})
        else:
            self.event("user", user_key, inv, req, content=f"{rng.choice(TEXTS)} #{n}")
        self.maybe_summary()
        if self.reuse_call_ids:
            self.calls = 0  # numbered afresh each run (call1, call2… again), as some frameworks do
        for _ in range(rng.choice((0, 1, 1, 2))):
            if self.reuse_call_ids and rng.random() < 0.3:
                self.calls = 0  # or afresh each model response
            rkey = key if rng.random() < 0.8 else rng.choice(KEYS)
            if rng.random() < 0.15:
                self.event("assistant", rkey, inv, req, content="思考中…", extra={"partial": True})
            width = rng.choice((1, 1, 2, 3))
            ids = []
            for _ in range(width):
                self.calls += 1
                ids.append(f"call{self.calls}")
            calls = [{"id": c, "type": "function", "function": {"name": "lookup", "arguments": '{"q": "天气"}'}}
                     for c in ids]  # fmt: skip
            self.event("assistant", rkey, inv, req, content=rng.choice((None, "let me check")), tool_calls=calls)
            rng.shuffle(ids)
            for c in ids:
                if rng.random() < 0.15:
                    self.pending.append((c, rkey, inv, req))
                else:
                    marker = self.next_id()  # the event's id in its text: a check finds it in the request
                    self.event(
                        "tool", rkey, inv, req, tool_call_id=c, content=f"result {c} {marker} 晴 " * rng.randint(1, 3)
                    )
                self.maybe_summary()
        if self.pending and rng.random() < 0.5:
            c, rkey, pinv, preq = self.pending.pop(rng.randrange(len(self.pending)))
            self.event("tool", rkey, pinv, preq, tool_call_id=c, content=f"late result {c} {self.next_id()} 迟到")
        if rng.random() < 0.2:
            self.event("assistant", rng.choice(KEYS), inv, req, content="sub-agent note 子代理")
        self.event("assistant", key, inv, req, content=f"answer {n} 好的")
        self.maybe_summary()


def generate(rng: random.Random, session_id: str, *, reuse_call_ids: bool = False) -> Generated:
    """One session of 2-4 runs with 1-3 check points (always one at the end).

    ``reuse_call_ids``: tool-call ids are numbered afresh each run, and sometimes each model response, so
    one id names calls of several turns (a late result then answers its own turn's call)."""
    b = _Builder(rng, session_id, reuse_call_ids)
    runs = rng.randint(2, 4)
    for n in range(1, runs + 1):
        b.run(n)
        if n < runs and rng.random() < 0.2:
            b.g.checks.append(len(b.g.steps))
    # A mid-run check point (after a tool round, before an answer: the resume tail) or a random one.
    if len(b.g.steps) > 3:
        b.g.checks.append(rng.randint(len(b.g.steps) // 2, len(b.g.steps) - 1))
    b.g.checks.append(len(b.g.steps))
    b.g.checks = sorted(set(b.g.checks))
    return b.g
