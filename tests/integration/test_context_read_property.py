"""Equivalence of the one context read against the real Cassandra (issue 12, point 1).

Generated sessions (``tests/support/context_sessions.py``) are written through
the real projector, check point by check point. At each check point an agent
of a random filter key reads with ``ContextReader.read`` and assembles with
``assemble_from_read``; the request must equal the one ``assemble`` builds from
the full in-memory history with the oracle's summary (the key's own, else the
nearest ancestor's), and be valid. The turn answered is a new message, a
stored user event named by id (``current_event_id``, as the facade reads), or
the latest one. The sessions hold late events (stamped before events logged
before them): the full history is in log order, so one logged after a
boundary event is in the expected request, and the read must find it.
``DISTILL_CONTEXT_READ_SESSIONS`` sessions (2000 unless set), seed
``DISTILL_CONTEXT_READ_SEED``; then ``DISTILL_CONTEXT_READ_REUSED_SESSIONS`` (600) sessions whose tool-call
ids repeat across turns, where every tool result after the boundary must also be in the request or named
in a note.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import time
from typing import Any

import pytest

from projections.context_read import ContextReader, visible
from projections.projector import SourceRecord
from schemas import DeadLetter, SessionEvent, SessionKey, SessionSummary
from streams.context import AssemblyOptions, assemble, assemble_from_read, find_violations
from streams.context.history import covered_mask
from tests.integration.test_projections_support import EVENTS, SUMMARIES, Store, store
from tests.support.context_sessions import KEYS, Generated, applicable, generate

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="session")]
__all__ = ["store"]

SESSIONS = int(os.environ.get("DISTILL_CONTEXT_READ_SESSIONS", "2000"))
REUSED_SESSIONS = int(os.environ.get("DISTILL_CONTEXT_READ_REUSED_SESSIONS", "600"))
SEED = int(os.environ.get("DISTILL_CONTEXT_READ_SEED", "12"))
SYSTEM = "You are a travel agent. 你是旅行助手。"
TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "look up", "parameters": {}}}]
WRITE_CHUNK = 4000
READERS = 48
KEYS_PER_CHECK = int(os.environ.get("DISTILL_CONTEXT_READ_KEYS", "1"))


def _records(steps: list[SessionEvent | SessionSummary], offsets: dict[str, int]) -> list[SourceRecord]:
    out = []
    for step in steps:
        topic = EVENTS if isinstance(step, SessionEvent) else SUMMARIES
        offsets[topic] = offsets.get(topic, 0) + 1
        out.append(SourceRecord(topic, 0, offsets[topic], b"k", step.model_dump_json().encode()))
    return out


def _oracle(g: Generated, upto: int, filter_key: str, current: str | SessionEvent | None, opts: AssemblyOptions) -> Any:
    events = [s for s in g.steps[:upto] if isinstance(s, SessionEvent)]
    latest: dict[str, SessionSummary] = {}
    for s in g.steps[:upto]:
        if isinstance(s, SessionSummary):  # versions of a key grow step by step
            latest[s.filter_key] = s
    summary = applicable(latest, filter_key)
    return summary, assemble(SYSTEM, summary, events, current, TOOLS, opts)


async def test_read_call_assembles_what_the_full_history_gives(store: Store) -> None:
    await _equivalence(store, SESSIONS, reuse_call_ids=False)


async def test_reused_call_ids_read_as_the_full_history(store: Store) -> None:
    """Tool-call ids numbered afresh each run (``call1`` in every turn): a late result answers its own
    turn's call on both paths (the read used to find only the id's latest call, so the result was left
    out of the request built from the read), and every tool result after the boundary is in the request
    or named in it."""
    await _equivalence(store, REUSED_SESSIONS, reuse_call_ids=True)


def _unnamed_results(g: Generated, upto: int, summary: SessionSummary | None, filter_key: str, text: str) -> list[str]:
    """The tool results after the boundary (as the key sees them) whose id the request neither shows in the
    result's text nor names in a note."""
    log = [s for s in g.steps[:upto] if isinstance(s, SessionEvent)]
    mine = [e for e in log if visible(e.filter_key, filter_key) and not e.partial]
    covered = covered_mask(mine, summary.boundary if summary is not None else None, log=log)
    named = set(re.findall(r"[rs]\d+-e\d+", text))
    return [e.event_id for e, c in zip(mine, covered, strict=True)
            if not c and e.message.role == "tool" and e.event_id not in named]  # fmt: skip


async def _equivalence(store: Store, count: int, *, reuse_call_ids: bool) -> None:
    # Pages of 8 rows: generated sessions are short, and the tail and the scan back must cross pages.
    reader = ContextReader(store.session, store.settings.cassandra.keyspace, page_size=8)
    rng = random.Random(SEED)
    prefix = "r" if reuse_call_ids else "s"
    sessions = [generate(rng, f"{prefix}{i}", reuse_call_ids=reuse_call_ids) for i in range(count)]
    written = [0] * len(sessions)
    offsets: dict[str, int] = {}
    dead: list[DeadLetter] = []

    async def sink(letter: DeadLetter) -> None:
        dead.append(letter)

    failures: list[str] = []
    stats: dict[str, float] = {"checks": 0, "reads": 0, "named": 0, "events_read": 0, "events_total": 0, "queries": 0}
    started, cpu_started = time.monotonic(), sum(os.times()[:2])
    gate = asyncio.Semaphore(READERS)

    async def check(i: int, upto: int) -> None:
        g = sessions[i]
        local = random.Random(f"{SEED}-{i}-{upto}")
        for filter_key in local.sample(KEYS, KEYS_PER_CHECK):
            opts = AssemblyOptions(add_session_summary=True, injection_mode=local.choice(("system", "user")),
                                   filter_key=filter_key)  # fmt: skip
            # The turn answered: a new message, a stored user event named by id (as the facade does), or the latest.
            stored = [e for e in g.steps[:upto] if isinstance(e, SessionEvent) and e.message.role == "user"
                      and not e.partial and visible(e.filter_key, filter_key)]  # fmt: skip
            draw = local.random()
            named = local.choice(stored) if stored and draw >= 0.8 else None
            current: str | SessionEvent | None = "and tomorrow? 明天呢？" if draw < 0.2 else named
            expected_summary, expected = _oracle(g, upto, filter_key, current, opts)
            async with gate:
                read = await reader.read(SessionKey("app", "u", g.session_id), filter_key,
                                         current_event_id=named.event_id if named else None)  # fmt: skip
            stats["named"] += named is not None
            got = assemble_from_read(SYSTEM, read, None if named else current, TOOLS, AssemblyOptions(
                add_session_summary=True, injection_mode=opts.injection_mode))  # fmt: skip
            stats["reads"] += 1
            stats["events_read"] += len(read.events)
            stats["events_total"] += sum(isinstance(s, SessionEvent) for s in g.steps[:upto])
            stats["queries"] += read.stats.queries
            want_key = None if expected_summary is None else (expected_summary.filter_key, expected_summary.version)
            got_key = None if read.summary is None else (read.summary.filter_key, read.summary.version)
            problems = find_violations(got.messages)
            unnamed = _unnamed_results(
                g, upto, expected_summary, filter_key, json.dumps(got.messages, ensure_ascii=False)
            )
            if unnamed:
                problems = [*problems, f"tool results in neither the request nor a note: {unnamed}"]
            if got.messages != expected.messages or got.tools != expected.tools or want_key != got_key or problems:
                failures.append(
                    f"session {g.session_id} after {upto} steps, key {filter_key!r}, current {current!r}: "
                    f"summary {got_key} vs {want_key}; violations {problems}\n"
                    f"got:      {json.dumps(got.messages, ensure_ascii=False)}\n"
                    f"expected: {json.dumps(expected.messages, ensure_ascii=False)}"
                )

    for round_ in range(max(len(g.checks) for g in sessions)):
        batch: list[SourceRecord] = []
        due: list[tuple[int, int]] = []
        for i, g in enumerate(sessions):
            if round_ < len(g.checks):
                upto = g.checks[round_]
                batch += _records(g.steps[written[i] : upto], offsets)
                written[i] = upto
                due.append((i, upto))
        t = time.monotonic()
        for start in range(0, len(batch), WRITE_CHUNK):
            await store.projector.project(batch[start : start + WRITE_CHUNK], sink)
        stats["write_s"] = stats.get("write_s", 0) + time.monotonic() - t
        t = time.monotonic()
        await asyncio.gather(*(check(i, upto) for i, upto in due))
        stats["read_s"] = stats.get("read_s", 0) + time.monotonic() - t
        stats["checks"] += len(due)
    elapsed = time.monotonic() - started
    cpu = sum(os.times()[:2]) - cpu_started
    print(
        f"\ncontext read equivalence (reused call ids: {reuse_call_ids}): {len(sessions)} sessions, {stats} "
        f"in {elapsed:.1f}s ({cpu:.1f}s CPU here)"
    )
    assert dead == []
    assert not failures, f"{len(failures)} of {stats['reads']} reads differ; first:\n" + "\n\n".join(failures[:3])
    assert stats["checks"] == sum(len(g.checks) for g in sessions)
    assert stats["reads"] >= len(sessions) * KEYS_PER_CHECK
    assert stats["named"] > 0 or count < 50  # a fifth of the checks: some in any run of 50 sessions
