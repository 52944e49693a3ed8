"""Recall oracle: whatever a request cuts or leaves out comes back, exactly, by following its own note.

Seeded random sessions (CJK, Japanese, Korean in precomposed and conjoining
jamo, emoji ZWJ sequences, flags and skin tones, combining marks, lone
surrogates as the facade publishes them — escaped —, 50–500 KB tool results,
JSON results and arguments, list-of-parts content, parallel tool calls, error
events without text, a branch filter key) are projected into real Cassandra;
each request is assembled through the agent's read path (``ContextReader`` +
``assemble_from_read`` fitted into a tight budget, as the facade does). Then,
for every payload cut and every event a note names, the note is followed as an
agent follows it — ``session_load`` through the recall executor, paging with
``next_content_offset`` — and what comes back must be the payload the request
stands for, character for character; each visible piece of a cut is the
payload's head or tail, cut on a character boundary. Every event the request
shows no whole copy of must be cut or named.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio
import regex

from projections.context_read import ContextReader
from projections.errors import event_not_found as not_found
from projections.event_windows import MAX_SKIPPED
from projections.indexer import RecallIndexer, deep_group_of
from projections.textcut import is_boundary
from schemas import FunctionCall, SessionEvent, SessionKey, ToolCall
from schemas.settings import Settings
from schemas.text import utf8_text
from streams.clients.recall_reader import CassandraRecallReader
from streams.context.assembly import AssemblyOptions
from streams.context.compaction import CompactionConfig
from streams.context.fitting import fit
from streams.context.from_read import assemble_from_read
from streams.context.history import event_message
from streams.context.pairing import pair_results
from streams.context.recall_tools import RecallCapabilities, RecallExecutor
from streams.rules.tokens import ScriptAwareTokenCounter
from streams.summarizer.payloads import cut_event
from tests.integration.test_projections_support import EVENTS, Store, close_store, event, open_store, record, summary

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="session")]

APP = "shop"
TOOLS = ("search", "読む", "fetch", "검색")
BRANCH = f"{APP}/research"
PIECES = (
    "The deployment log shows worker restarts and queue depth figures. ",
    "数据库连接池在夜间批处理时耗尽，重试队列不断增长。",
    "東京の倉庫で在庫を確認しました。カタカナもひらがなも。",
    "서울 지점의 재고를 확인했습니다. ",
    "\u1112\u1161\u11ab\u1100\u1173\u11af ",  # 한글 in conjoining jamo (NFD)
    "family 👩\u200d👩\u200d👧\u200d👦 flag 🇯🇵🇰🇷 ok 👍🏽 ",
    "cafe\u0301 a\u0308\u0323 n\u0303 ",
    utf8_text("file \udce9\udcff name "),  # a lone surrogate, escaped as the facade publishes it
    "❤\ufe0f keycap 1\ufe0f\u20e3 ",
    "नमस्ते क्षत्रिय\r\n",
)


def _text(rng: random.Random, chars: int) -> str:
    out: list[str] = []
    n = 0
    while n < chars:
        piece = rng.choice(PIECES)
        out.append(piece)
        n += len(piece)
    return "".join(out)


@dataclass
class Session:
    key: SessionKey
    records: list[dict[str, Any]]
    events: dict[str, SessionEvent]
    order: list[str]


def build_session(seed: int, rounds: int = 7, *, reuse_ids: bool = False) -> Session:
    """A seeded session: rounds of a user turn, parallel calls with their results, a reply; a branch; errors.

    ``reuse_ids``: call ids restart ``call_0`` each round (as frameworks that number calls afresh each turn do),
    the tools differ from round to round and results seldom carry their tool's name.
    """
    rng = random.Random(seed)
    key = SessionKey(APP, "oracle", f"s-{seed}{'-reused' if reuse_ids else ''}")
    records: list[dict[str, Any]] = []
    at = 0.0
    round_no = 0

    def add(eid: str, **kw: Any) -> dict[str, Any]:
        nonlocal at
        at += 1
        rec = event(key, eid, at=at, **kw)
        rec["request_id"] = rec["invocation_id"] = f"q{round_no}"
        records.append(rec)
        return rec

    big_done = False
    for r in range(rounds):
        round_no = r
        branch = BRANCH if rng.random() < 0.2 else ""
        content: Any = _text(rng, rng.choice((40, 300, 4000)))
        if rng.random() < 0.3:  # list-of-parts content: its text parts joined
            content = [{"type": "text", "text": _text(rng, 200)}, {"type": "text", "text": _text(rng, 3000)}]
        add(f"u{r}", content=content, filter_key=branch)
        calls = []
        for c in range(rng.choice((0, 1, 2, 3))):
            if rng.random() < 0.3:
                arguments = _text(rng, 2500)  # not JSON
            else:
                value = {"query": _text(rng, rng.choice((50, 3000))), "limit": c,
                         "tags": [_text(rng, 30), _text(rng, 1500)]}  # fmt: skip
                ascii_only = rng.random() < 0.5
                if ascii_only:  # a file name of non-UTF-8 bytes: its lone surrogates escaped in the JSON text
                    value["query"] = "dir/\udce9\udcff/" + value["query"]
                arguments = json.dumps(value, ensure_ascii=ascii_only)
            function = {"name": rng.choice(TOOLS[:2] if not reuse_ids else TOOLS), "arguments": arguments}
            calls.append({"id": f"call_{c}" if reuse_ids else f"c{r}-{c}", "type": "function", "function": function})
        if calls:
            add(f"a{r}", role="assistant", content=_text(rng, 100) if rng.random() < 0.5 else None,
                tool_calls=calls, filter_key=branch)  # fmt: skip
            for c, call in enumerate(calls):
                name = call["function"]["name"] if not reuse_ids or rng.random() < 0.2 else None
                eid = f"t{r}-{c}" if reuse_ids else f"t{call['id']}"
                size = rng.choice((300, 6000, 50_000))
                if not big_done and rng.random() < 0.4:
                    size, big_done = rng.choice((120_000, 500_000)), True
                result = _text(rng, size)
                if rng.random() < 0.3:
                    result = json.dumps({"rows": [_text(rng, 100) for _ in range(size // 120 + 1)], "ok": True},
                                        ensure_ascii=False)  # fmt: skip
                roll = rng.random()
                if roll < 0.07:  # a call left without its result (cancelled), or a result without its call id
                    if roll < 0.035:
                        add(eid, role="tool", content=result, name=name, filter_key=branch)
                    continue
                if roll < 0.2:  # a failed tool: its error is its only text
                    rec = add(eid, role="tool", content=None, tool_call_id=call["id"], name=name, filter_key=branch)
                    rec["error"] = {"type": "tool_error", "message": _text(rng, rng.choice((80, 5000)))}
                else:
                    add(eid, role="tool", content=result, tool_call_id=call["id"], name=name, filter_key=branch)
        if rng.random() < 0.2:  # a failed model call: no text, only the error
            rec = add(f"x{r}", role="assistant", content=None, filter_key=branch)
            rec["error"] = {"type": "model_error", "message": _text(rng, rng.choice((60, 4000)))}
        add(f"r{r}", role="assistant", content=_text(rng, rng.choice((200, 5000))), filter_key=branch)
    round_no = rounds
    add("u-last", content="继续 — what next? 다음은?")
    events = {r["event_id"]: SessionEvent.model_validate(r) for r in records}
    return Session(key, records, events, [r["event_id"] for r in records])


# -- what the request says -------------------------------------------------------------------------------------

_CUT = re.compile(
    r"\[distill: (?P<n>\d+) characters cut from the middle of (?P<what>this message|these tool-call arguments|"
    r"this tool result); (?P<details>[^\]]*)\]"
)
_IDS = re.compile(r"event_id=(?P<event>[^;\s\])]+)(?:; tool_call_id=(?P<call>[^;\s\]]*))?")
_PLACEHOLDER = re.compile(r"^event_id: (?P<event>\S+)$", re.M)
_PLACEHOLDER_CALL = re.compile(r"^tool_call_id: (?P<call>\S+)$", re.M)
_PLACEHOLDER_TOOL = re.compile(r"^tool_name: (?P<tool>.+)$", re.M)
_TOOL = re.compile(r"tool_name=(?P<tool>[^;\]]*)")
_COMPACT = re.compile(r"\[distill: event_id=(?P<event>[^;]*); tool_call_id=(?P<call>[^;]*); session_load\]")
_NOTE = re.compile(r"\[distill: (?:left out|earlier runs left out)[^\]]*?event_id=(?P<ids>[^;\]]*);[^\]]*\]")
_RANGE = re.compile(r"^(?P<first>.+?) … (?P<last>\S+) \((?P<n>\d+) events\)$")
_OLDER = re.compile(
    r"^(?P<newest>.+) and (?P<k>\d+) older ones logged from (?P<first>\S+) to (?P<last>\S+) \(\d+ events\)$"
)


@dataclass(frozen=True)
class Cut:
    """A cut found in the request: the event (and call) it names, what was cut, and the visible ends."""

    event_id: str
    call_id: str | None
    head: str
    tail: str
    removed: int
    path: tuple[Any, ...] = ()
    """For arguments cut inside a JSON string: where that string sits in the arguments' JSON."""
    named_call: str | None = None
    """The tool-call id the note names beside the event id (a model may load by it instead)."""
    named_tool: str | None = None
    """The tool name the note names."""


def _split_cut(text: str, m: re.Match[str], pad: str) -> tuple[str, str]:
    head, tail = text[: m.start()], text[m.end() :]
    assert head.endswith(pad) and tail.startswith(pad), (head[-20:], tail[:20])
    return head[: len(head) - len(pad)], tail[len(pad) :]


def _strings(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], str]]:
    if isinstance(value, str):
        return [(path, value)]
    if isinstance(value, list):
        return [s for i, v in enumerate(value) for s in _strings(v, (*path, i))]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in _strings(v, (*path, k))]
    return []


def _at(value: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        value = value[step]
    return value


def cuts_in(messages: list[dict[str, Any]]) -> tuple[list[Cut], list[str]]:
    """Every cut marker in the request, and the raw text of every note naming events."""
    cuts: list[Cut] = []
    notes: list[str] = []
    for msg in messages:
        content = msg.get("content") or ""
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content)
        notes.extend(m.group(0) for m in _NOTE.finditer(content))
        for m in _CUT.finditer(content):
            ids = _IDS.search(m["details"])
            assert ids is not None, m.group(0)
            head, tail = _split_cut(content, m, "\n\n")
            tool = _TOOL.search(m["details"])
            cuts.append(Cut(ids["event"], None, head, tail, int(m["n"]), named_call=ids["call"] or None,
                            named_tool=(tool["tool"] or None) if tool else None))  # fmt: skip
        for m in _COMPACT.finditer(content):
            cuts.append(Cut(m["event"], None, "", "", -1, named_call=m["call"] or None))
        if content.startswith("[distill: tool output elided]"):
            call, tool = _PLACEHOLDER_CALL.search(content), _PLACEHOLDER_TOOL.search(content)
            cuts.extend(Cut(m["event"], None, "", "", -1, named_call=call["call"] if call else None,
                            named_tool=tool["tool"] if tool else None)
                        for m in _PLACEHOLDER.finditer(content))  # fmt: skip
        for call in msg.get("tool_calls") or []:
            arguments = call["function"]["arguments"]
            value = json.loads(arguments)  # a cut keeps the arguments a JSON object
            if isinstance(value, dict) and "_distill_context_note" in value:
                note = value["_distill_context_note"]
                m = _CUT.search(note)
                if m is None:  # the resume tail's placeholder: the whole arguments named
                    assert "session_load" in note, note
                    cuts.append(Cut(_IDS.search(note.replace('"', ""))["event"], call["id"], "", "", -1,  # type: ignore[index]
                                    named_call=call["id"]))  # fmt: skip
                    continue
                ids = _IDS.search(m["details"])
                assert ids is not None and ids["call"] == call["id"]
                cuts.append(Cut(ids["event"], call["id"], value["head"], value["tail"], int(m["n"]),
                                named_call=call["id"]))  # fmt: skip
                continue
            for path, s in _strings(value):
                for m in _CUT.finditer(s):
                    ids = _IDS.search(m["details"])
                    assert ids is not None and ids["call"] == call["id"]
                    head, tail = _split_cut(s, m, " ")
                    cuts.append(Cut(ids["event"], call["id"], head, tail, int(m["n"]), path, named_call=call["id"]))
    return cuts, notes


def named_in(note: str, order: list[str]) -> tuple[list[str], list[str]]:
    """The ids a note names, and the ids it names only as part of a range (by the log's ``order``)."""
    ids = _NOTE.search(note)["ids"].strip()  # type: ignore[index]
    span = _RANGE.match(ids)
    if span:
        named = [*span["first"].split(", "), span["last"]]
        lo, hi = order.index(named[0]), order.index(named[-1])
        return named, [e for e in order[lo : hi + 1] if e not in named]
    older = _OLDER.match(ids)
    if older:
        named = older["newest"].split(", ")
        lo, hi = order.index(older["first"]), order.index(older["last"])
        return [older["first"], older["last"], *named], order[lo + 1 : hi]
    return ids.split(", "), []


# -- following a note -------------------------------------------------------------------------------------------


async def _call(executor: RecallExecutor, tool: str, **args: Any) -> dict[str, Any]:
    call = ToolCall(id="r1", function=FunctionCall(name=tool, arguments=json.dumps(args)))
    return json.loads((await executor.execute(call)).content or "")


async def load_whole(executor: RecallExecutor, event_id: str, limit: int | None = None) -> tuple[str, dict[str, str]]:
    """The named event's text and each call's arguments, every page read (``next_content_offset``)."""
    text: list[str] = []
    calls: dict[str, list[str]] = {}
    offset: int | None = 0
    while offset is not None:
        args: dict[str, Any] = {"event_id": event_id, "content_offset": offset}
        if limit is not None:
            args["content_limit"] = limit
        answer = await _call(executor, "session_load", **args)
        assert "error" not in answer, (event_id, answer)
        [anchor] = [m for m in answer["messages"] if m["anchor"]]
        assert anchor["event_id"] == event_id
        assert anchor["returned_bytes"] == len(anchor["content"].encode())
        text.append(anchor["content"])
        for call in anchor.get("tool_calls", []):
            calls.setdefault(call["id"], []).append(call["arguments"])
        offset = anchor.get("next_content_offset")
    return "".join(text), {k: "".join(v) for k, v in calls.items()}


async def walk(executor: RecallExecutor, order: list[str], first: str, last: str) -> set[str]:
    """Every event id the windows from ``first`` on name (its messages and the events it passes over), each
    window anchored on the latest id the one before named, until ``last`` is named or nothing new comes."""
    reached = {first}
    anchor = first
    while last not in reached:
        answer = await _call(executor, "session_load", event_id=anchor, before=0, after=4, content_limit=1)
        ids = [m["event_id"] for m in answer["messages"]] + [e["event_id"] for e in answer.get("skipped_events", [])]
        reached.update(ids)
        latest = max(ids, key=order.index)
        if latest == anchor:
            break
        anchor = latest
    return reached


def shown(ev: SessionEvent) -> tuple[str, dict[str, str]]:
    """What the request stands for of ``ev``: the text it shows and each call's arguments."""
    msg = event_message(ev) or ev.message  # a result without a call id: not shown, its text named
    return msg.content or "", {c.id: c.function.arguments for c in msg.tool_calls}


def check_visible(cut: Cut, original: str) -> None:
    """The visible pieces are the payload's head and tail, on character boundaries, the count exact."""
    if cut.path:
        original = _at(json.loads(original), cut.path)
    assert original.startswith(cut.head) and original.endswith(cut.tail), cut.event_id
    assert len(cut.head) + len(cut.tail) + cut.removed == len(original), cut.event_id
    assert cluster_boundary(original, len(cut.head)), (cut.event_id, cut.head[-4:])
    assert cluster_boundary(original, len(original) - len(cut.tail)), (cut.event_id, cut.tail[:4])


def cluster_boundary(text: str, i: int) -> bool:
    """Whether ``i`` is a boundary of UAX #29's extended grapheme clusters (``regex``'s ``\\X``), an oracle
    independent of ``projections.textcut``; segmented from the space before it (always a boundary)."""
    if i in (0, len(text)):
        return True
    start = max(0, text.rfind(" ", 0, i - 1))
    return i - start in {m.end() for m in regex.finditer(r"\X", text[start : i + 64])}


# -- the test ---------------------------------------------------------------------------------------------------


@pytest_asyncio.fixture(loop_scope="session")
async def store(pooled_settings: Settings) -> AsyncIterator[Store]:
    s = open_store(pooled_settings)
    try:
        yield s
    finally:
        close_store(s)


def _options(budget: int, filter_key: str, pass1: bool) -> AssemblyOptions:
    compaction = CompactionConfig(enabled=True, keep_recent_requests=1, tool_result_max_tokens=2000) if pass1 \
        else CompactionConfig()  # fmt: skip
    return AssemblyOptions(
        filter_key=filter_key, token_budget=budget, token_counter=ScriptAwareTokenCounter(),
        recall=RecallCapabilities(search=True, load=True), compaction=compaction,
    )  # fmt: skip


def turns_of(session: Session) -> tuple[dict[str, list[tuple[str, list[str]]]], dict[str, str]]:
    """The oracle's pairing (``pair_results``, the full history's rule): each call id's calls in log order with
    the results answering each, and each result's tool (the name of the call it answers)."""
    evs = [session.events[e] for e in session.order]
    pairs = pair_results([ev.message for ev in evs])
    turns: dict[str, dict[str, list[str]]] = {}
    tools: dict[str, str] = {}
    for ev in evs:
        for call in ev.message.tool_calls:
            turns.setdefault(call.id, {}).setdefault(ev.event_id, [])
    for result, call in pairs.items():
        ev, call_ev = evs[result], evs[call]
        call_id = ev.message.tool_call_id or ""
        turns[call_id][call_ev.event_id].append(ev.event_id)
        tools[ev.event_id] = next(c.function.name for c in call_ev.message.tool_calls if c.id == call_id)
    return {i: list(t.items()) for i, t in turns.items()}, tools


class Follower:
    """Follows a request's cuts and notes through the recall executor, each event loaded once."""

    def __init__(self, session: Session, executor: RecallExecutor) -> None:
        self.session, self.executor = session, executor
        self.loaded: dict[str, tuple[str, dict[str, str]]] = {}
        self.turns, self.tools = turns_of(session)
        self.by_call_seen: set[tuple[str, str]] = set()

    async def by_call(self, cut: Cut) -> None:
        """A note naming a tool-call id beside the event id: the tool it names is the one of the event's own
        call; a load by the call id answers the id's newest result with text and, when the id is reused
        across turns, names every call of the id and its results, the noted event among them."""
        event_id, call_id = cut.event_id, cut.named_call
        assert call_id is not None
        if cut.named_tool is not None and event_id in self.tools:
            assert cut.named_tool == self.tools[event_id], (event_id, cut.named_tool)
        if (event_id, call_id) in self.by_call_seen:
            return
        self.by_call_seen.add((event_id, call_id))
        turns = self.turns[call_id]
        results = [r for _, rs in turns for r in rs]
        with_text = [r for r in results if self.session.events[r].shown_text.strip()]
        answer = await _call(self.executor, "session_load", tool_call_id=call_id, content_limit=1)
        newest = with_text[-1:] if len(turns) > 1 else results[-1:] if results[-1:] == with_text[-1:] else []
        if not newest:
            assert "error" in answer, (call_id, answer)
            return
        assert answer["anchor_event_id"] == newest[0], (call_id, answer["anchor_event_id"], newest)
        [anchor] = [m for m in answer["messages"] if m["anchor"]]
        assert anchor["tool_name"] == self.tools[newest[0]], (call_id, anchor["tool_name"])
        if len(turns) > 1:
            listed = [(t["call_event_id"], t["result_event_ids"]) for t in answer["tool_call_turns"]]
            assert listed == [(c, rs) for c, rs in turns], (call_id, listed, turns)
            assert "reused" in answer["warning"]
        else:
            assert "tool_call_turns" not in answer
        if event_id in self.tools:  # a tool result: loaded by its event id, named with its own call's tool
            own = await _call(self.executor, "session_load", event_id=event_id, content_limit=1)
            [anchor] = [m for m in own["messages"] if m["anchor"]]
            assert anchor["tool_name"] == self.tools[event_id], (event_id, anchor["tool_name"])

    async def load(self, event_id: str) -> tuple[str, dict[str, str]]:
        if event_id not in self.loaded:
            self.loaded[event_id] = await load_whole(self.executor, event_id)
        return self.loaded[event_id]

    async def walk(self, first: str, last: str) -> set[str]:
        """Every event id the windows from ``first`` on name, to ``last``."""
        return await walk(self.executor, self.session.order, first, last)

    async def check(
        self, messages: list[dict[str, Any]], filter_key: str, covered: frozenset[str] = frozenset()
    ) -> None:
        """Every cut and note of ``messages`` followed; every event of ``filter_key`` accounted for (but the
        ``covered`` ones: the summary the request shows holds them)."""
        json.dumps(messages, ensure_ascii=False).encode("utf-8")  # what the client sends: UTF-8
        cuts, notes = cuts_in(messages)
        for cut in cuts:
            if cut.named_call is not None:
                await self.by_call(cut)
            text, calls = shown(self.session.events[cut.event_id])
            original = calls[cut.call_id] if cut.call_id else text
            if cut.removed >= 0:
                check_visible(cut, original)
            got_text, got_calls = await self.load(cut.event_id)
            assert (got_calls[cut.call_id] if cut.call_id else got_text) == original, (filter_key, cut.event_id)
        in_notes: set[str] = set()
        for note in notes:
            named, ranged = named_in(note, self.session.order)
            # The ids of a range the note does not name are found by walking its windows (messages, then
            # the events each window passes over); each loads back like a named one.
            reached = await self.walk(named[0], named[-1]) if ranged else set()
            assert [e for e in ranged if e not in reached] == [], (filter_key, note)
            for event_id in [*named, *ranged]:
                assert (await self.load(event_id)) == shown(self.session.events[event_id]), (filter_key, event_id)
            in_notes.update(named, ranged)
        # Every event the request stands for is there whole, or cut, or named.
        texts = [m.get("content") or "" for m in messages]
        arguments = {c["id"]: c["function"]["arguments"] for m in messages for c in m.get("tool_calls") or []}
        cut_ids = {c.event_id for c in cuts}
        for eid in self.session.order:
            ev = self.session.events[eid]
            if (
                eid in covered
                or (event_message(ev) is None and not (ev.message.role == "tool" and not ev.message.tool_call_id))
                or not (filter_key == "" or ev.filter_key in ("", filter_key))
            ):
                continue
            text, calls = shown(ev)
            whole = (not text or any(text in t for t in texts)) and all(arguments.get(c) == a for c, a in calls.items())
            assert whole or eid in cut_ids or eid in in_notes, (filter_key, eid)


@pytest.mark.parametrize(("seed", "reuse_ids"), [(3, False), (11, False), (29, False), (47, False), (5, True),
                                                 (23, True), (71, True)])  # fmt: skip
async def test_every_cut_and_left_out_event_loads_back_exactly(store: Store, seed: int, reuse_ids: bool) -> None:
    session = build_session(seed, reuse_ids=reuse_ids)
    await store.events(*session.records)
    assert store.dead == []
    reader = ContextReader(store.session, store.settings.cassandra.keyspace)
    executor = RecallExecutor(CassandraRecallReader(store.reader), app_name=session.key.app_name,
                              user_id=session.key.user_id, session_id=session.key.session_id)  # fmt: skip
    follower = Follower(session, executor)
    for filter_key, budget, pass1 in (("", 6000, False), (BRANCH, 3000, True), ("", 1500, seed % 2 == 0)):
        read = await reader.read(session.key, filter_key, full_history=True)
        options = _options(budget, filter_key, pass1)
        fitted = fit(lambda o, read=read: assemble_from_read("You are helpful.", read, options=o), options)
        await follower.check(fitted.request.messages, filter_key)
    # A summary whose boundary lies inside the last round: the request shows the summary, the events after
    # its boundary and the round's covered events as its resume tail (their large payloads replaced).
    last = max(int(e[1:]) for e in session.order if re.fullmatch(r"u\d+", e))
    end = session.order.index(f"r{last}") - 1  # the round's last tool result (or its user message)
    await store.summaries(
        summary(session.key, 1, text="what happened so far", cutoff=end + 1, last_event_id=session.order[end])
    )
    read = await reader.read(session.key, "", current_event_id=f"u{last}")
    options = dataclasses.replace(_options(1500, "", True), add_session_summary=True)
    fitted = fit(lambda o: assemble_from_read("You are helpful.", read, options=o), options)
    assert fitted.request.report.summary_injected
    await follower.check(fitted.request.messages, "", frozenset(session.order[: end + 1]))
    # Any page size gives the same payloads back.
    rng = random.Random(seed)
    for event_id in rng.sample(sorted(follower.loaded), 3):
        assert await load_whole(executor, event_id, rng.randint(1, 70_000)) == follower.loaded[event_id]


async def test_events_shown_without_text_of_their_own_load_back_as_shown(store: Store) -> None:
    """An error event without text (shown as ``type: …, message: …``), a blank or empty tool result: a request
    shows them, a cut or a note may name them, so ``session_load`` of their id returns what was shown."""
    key = SessionKey(APP, "oracle", "no-text")
    failed = event(key, "x1", at=2, role="assistant", content=None)
    failed["error"] = {"type": "model_error", "message": "上游超时 " * 400}
    tool_failed = event(key, "t1", at=4, role="tool", content=None, tool_call_id="c1", name="search")
    tool_failed["error"] = {"type": "tool_error", "message": "timeout"}
    call = {"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}
    call2 = {**call, "id": "c2"}
    calls = event(key, "a1", at=3, role="assistant", content=None, tool_calls=[call, call2])
    blank = event(key, "t2", at=5, role="tool", content=" \n" * 50, tool_call_id="c2", name="search")
    records = [event(key, "u1", at=1), failed, calls, tool_failed, blank]
    await store.events(*records)
    executor = RecallExecutor(CassandraRecallReader(store.reader), app_name=key.app_name, user_id=key.user_id,
                              session_id=key.session_id)  # fmt: skip
    for rec in records[1:]:
        ev = SessionEvent.model_validate(rec)
        assert await load_whole(executor, ev.event_id, 1000) == shown(ev)
    assert shown(SessionEvent.model_validate(failed))[0].startswith("type: model_error, message: 上游超时")


FACTS = ("armadillo 4417 vault", "钥匙藏在第七号仓库北墙", "合言葉はさくら餅です", "비밀번호는 청포도입니다")


async def _projected_and_indexed(
    store: Store, rng: random.Random, records: list[dict[str, Any]], key: SessionKey
) -> RecallExecutor:
    """``records`` projected, indexed by both index stages (a fresh group), and the session's recall executor."""
    group = f"g-oracle-{rng.randrange(1 << 30):x}"
    ks = store.settings.cassandra.keyspace
    primary = RecallIndexer(store.session, ks, events_topic=EVENTS, consumer_group=group, scope="primary")
    deep = RecallIndexer(store.session, ks, events_topic=EVENTS, consumer_group=deep_group_of(group), scope="deep",
                         primary_wait_s=5.0, primary_check_s=0.02)  # fmt: skip
    sources = [record(EVENTS, r) for r in records]

    async def dead(letter: Any) -> None:
        raise AssertionError(letter)

    await store.projector.project(sources, dead)
    await primary.project(sources, dead)
    await deep.project(sources, dead)
    return RecallExecutor(CassandraRecallReader(store.reader), app_name=key.app_name, user_id=key.user_id,
                          session_id=key.session_id)  # fmt: skip


async def test_a_fact_deep_in_a_large_result_is_found_and_the_hit_loads_it(store: Store) -> None:
    """Once both index stages caught up, ``session_search`` finds a fact planted deep in a large tool result
    (ASCII, Chinese, Japanese, Korean), and the hit's event, loaded page by page, is the result holding it."""
    rng = random.Random(5)
    key = SessionKey(APP, "oracle", "deep-facts")
    records: list[dict[str, Any]] = [event(key, "u0", at=0, content="look these up")]
    planted: dict[str, str] = {}
    for i, fact in enumerate(FACTS):
        size = rng.choice((60_000, 150_000, 400_000))
        filler = _text(rng, size)
        at = rng.randrange(40_000, len(filler) - 100)
        while not is_boundary(filler, at):
            at += 1
        call = {"id": f"c{i}", "type": "function", "function": {"name": "fetch", "arguments": "{}"}}
        records.append(event(key, f"a{i}", at=2 * i + 1, role="assistant", content=None, tool_calls=[call]))
        records.append(event(key, f"t{i}", at=2 * i + 2, role="tool", content=f"{filler[:at]} {fact} {filler[at:]}",
                             tool_call_id=f"c{i}", name="fetch"))  # fmt: skip
        planted[fact] = f"t{i}"
    executor = await _projected_and_indexed(store, rng, records, key)
    contents = {r["event_id"]: r["message"]["content"] for r in records}
    # A summary covers them all: the default scope (what the summary hides) finds them as the whole session does.
    await store.summaries(
        summary(key, 1, text="looked things up", cutoff=2 * len(FACTS), last_event_id=f"t{len(FACTS) - 1}")
    )
    for fact, event_id in planted.items():
        for scope in ("current_session", "current_hidden"):
            answer = await _call(executor, "session_search", query=fact, scope=scope, top_k=3)
            hits = [h["event_id"] for h in answer["results"]]
            assert hits[:1] == [event_id], (fact, scope, answer)
        text, _ = await load_whole(executor, hits[0])
        assert text == contents[event_id] and fact in text


_SUMMARY_CUT = re.compile(
    r"\n\[… (?P<n>[\d,]+) chars of (?P<what>this tool result|the arguments of this tool call|this message)"
    r"(?: \(call (?P<call>[^)]+)\))? left out; session_load\(event_id=\"(?P<event>[^\"]+)\"\) returns (?:it|them) "
    r"whole …\]\n"
)


async def test_every_summary_input_cut_loads_back_exactly(store: Store) -> None:
    """The summarizer's cuts (``streams.summarizer.payloads``) of the same sessions: each names a load that
    returns the payload exactly, and keeps its head and tail on character boundaries."""
    session = build_session(62, rounds=5)
    await store.events(*session.records)
    assert store.dead == []
    executor = RecallExecutor(CassandraRecallReader(store.reader), app_name=session.key.app_name,
                              user_id=session.key.user_id, session_id=session.key.session_id)  # fmt: skip
    follower = Follower(session, executor)
    rng = random.Random(62)
    kinds: set[str] = set()
    for ev in session.events.values():
        cut, records = cut_event(ev, rng.choice((64, 500, 3000)))
        found = 0
        pieces = [(cut.message.content or "", None), *((c.function.arguments, c.id) for c in cut.message.tool_calls)]
        for text, call_id in pieces:
            for m in _SUMMARY_CUT.finditer(text):
                found += 1
                kinds.add(m["what"] if ev.message.content or ev.message.tool_calls else "error")
                arguments = m["what"] == "the arguments of this tool call"
                assert m["event"] == ev.event_id and (m["call"] == call_id if arguments else True)
                payload_text, calls = shown(ev)
                original = calls[m["call"]] if arguments else payload_text
                check_visible(Cut(ev.event_id, None, text[: m.start()], text[m.end() :], int(m["n"].replace(",", ""))),
                              original)  # fmt: skip
                got_text, got_calls = await follower.load(ev.event_id)
                assert (got_calls[m["call"]] if arguments else got_text) == original, ev.event_id
        assert found == len(records), ev.event_id
    assert kinds == {"this tool result", "the arguments of this tool call", "this message", "error"}


async def test_a_load_outside_what_the_session_holds_is_an_error_never_an_empty_window(store: Store) -> None:
    """An unknown id, another session's id (without its session_id), an id of a deleted session, by event id or
    tool call id: the agent is told the anchor is not found, never answered with an empty window that reads as
    "nothing there"; with the other session's id named, its event loads."""
    here, there = SessionKey(APP, "oracle", "here"), SessionKey(APP, "oracle", "there")
    call = {"id": "c9", "type": "function", "function": {"name": "fetch", "arguments": "{}"}}
    result = event(there, "o3", at=3, role="tool", content="result", tool_call_id="c9", name="fetch")
    await store.events(event(here, "h1", at=1, content="here 数据"), event(there, "o1", at=1, content="there ☃"),
                       event(there, "o2", at=2, role="assistant", content=None, tool_calls=[call]), result)  # fmt: skip
    executor = RecallExecutor(CassandraRecallReader(store.reader), app_name=here.app_name, user_id=here.user_id,
                              session_id=here.session_id)  # fmt: skip
    assert await _call(executor, "session_load", event_id="nope") == {"error": not_found("nope", "here")}
    assert await _call(executor, "session_load", event_id="o1") == {"error": not_found("o1", "here")}
    assert (await load_whole(executor, "h1"))[0] == "here 数据"
    answer = await _call(executor, "session_load", event_id="o1", session_id="there", after=4)
    assert [m["event_id"] for m in answer["messages"]] == ["o1", "o3"]
    assert answer["skipped_events"] == [{"event_id": "o2", "role": "assistant", "tool_call_ids": ["c9"]}]
    await store.apply(record(EVENTS, {"type": "delete_session", "command_id": "del-there", "app_name": APP,
                                      "user_id": there.user_id, "session_id": there.session_id}))  # fmt: skip
    for args, error in (
        ({"event_id": "o1"}, not_found("o1", "there")),
        ({"event_id": "o2", "before": 0, "after": 4}, not_found("o2", "there")),
        ({"tool_call_id": "c9"}, 'tool_call_id "c9" not found in session "there"'),
    ):
        assert await _call(executor, "session_load", session_id="there", **args) == {"error": error}
    found = await _call(executor, "session_search", query="result", scope="other_sessions")
    assert found["results"] == []


async def test_a_long_run_of_tool_calls_is_walked_window_by_window(store: Store) -> None:
    """Forty tool-call events in a row: a window names at most ``MAX_SKIPPED`` of them and stops there, and
    anchoring on the last one named reads on to the end."""
    key = SessionKey(APP, "oracle", "many-calls")
    records = [event(key, "u1", at=0, content="go")]
    for i in range(40):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "step", "arguments": f'{{"i": {i}}}'}}
        records.append(event(key, f"a{i}", at=i + 1, role="assistant", content=None, tool_calls=[call]))
    records.append(event(key, "r1", at=50, role="assistant", content="done"))
    await store.events(*records)
    executor = RecallExecutor(CassandraRecallReader(store.reader), app_name=key.app_name, user_id=key.user_id,
                              session_id=key.session_id)  # fmt: skip
    answer = await _call(executor, "session_load", event_id="u1", before=0, after=1)
    assert [m["event_id"] for m in answer["messages"]] == ["u1"]
    assert [e["event_id"] for e in answer["skipped_events"]] == [f"a{i}" for i in range(MAX_SKIPPED)]
    order = [r["event_id"] for r in records]
    assert await walk(executor, order, "u1", "r1") == set(order)


async def test_a_range_walked_window_by_window_reaches_late_and_tied_events(store: Store) -> None:
    """A note names a range in log order ("logged from m1 to m9"); windows page by timestamp. An event logged
    in the range but stamped before its first event (late: ``l1``), or in its first event's millisecond with
    an id ordered before it (``k1``), lies behind the first window: the windows name it all the same."""
    key = SessionKey(APP, "oracle", "late-in-range")
    records = [
        event(key, "m1", at=10, content="first"),
        event(key, "k1", at=10, role="assistant", content="tied with m1, ordered before it"),
        event(key, "m2", at=11, content="second"),
        event(key, "l1", at=5, role="assistant", content="a sub-agent's late result"),
        event(key, "m3", at=12, role="assistant", content="third"),
        event(key, "m9", at=13, content="last"),
    ]
    await store.events(*records)
    executor = RecallExecutor(CassandraRecallReader(store.reader), app_name=key.app_name, user_id=key.user_id,
                              session_id=key.session_id)  # fmt: skip
    order = [r["event_id"] for r in records]
    assert await walk(executor, order, "m1", "m9") == set(order)
    for event_id in ("k1", "l1"):
        assert (await load_whole(executor, event_id))[0] == next(
            r["message"]["content"] for r in records if r["event_id"] == event_id
        )


async def test_a_load_by_a_call_id_reused_across_turns_names_every_turn(store: Store) -> None:
    """``call_0`` in three turns, each a different tool, results without their tool's name, the last one a
    blank result (no text, no error: a failed tool's error is its text): a load by the call id anchors on the
    newest result with text and names every call of the id with its results; each result loads by its event id
    with its own call's tool."""
    key = SessionKey(APP, "oracle", "reused-ids")
    records: list[dict[str, Any]] = []
    for turn, tool in enumerate(("search", "読む", "fetch")):
        call = {"id": "call_0", "type": "function", "function": {"name": tool, "arguments": f'{{"turn": {turn}}}'}}
        records += [
            event(key, f"u{turn}", at=4 * turn, content=f"question {turn}"),
            event(key, f"a{turn}", at=4 * turn + 1, role="assistant", content=None, tool_calls=[call]),
            event(
                key, f"t{turn}", at=4 * turn + 2, role="tool", content=f"结果 {turn} of {tool}", tool_call_id="call_0"
            ),
            event(key, f"r{turn}", at=4 * turn + 3, role="assistant", content=f"answer {turn}"),
        ]
    records[-2]["message"]["content"] = ""
    await store.events(*records)
    executor = RecallExecutor(CassandraRecallReader(store.reader), app_name=key.app_name, user_id=key.user_id,
                              session_id=key.session_id)  # fmt: skip
    answer = await _call(executor, "session_load", tool_call_id="call_0", before=0, after=1)
    assert answer["anchor_event_id"] == "t1"
    assert [(m["event_id"], m.get("tool_name"), m["content"]) for m in answer["messages"]] == [
        ("t1", "読む", "结果 1 of 読む"), ("r1", None, "answer 1")
    ]  # fmt: skip
    assert answer["tool_call_turns"] == [
        {"call_event_id": "a0", "result_event_ids": ["t0"]},
        {"call_event_id": "a1", "result_event_ids": ["t1"]},
        {"call_event_id": "a2", "result_event_ids": ["t2"]},
    ]
    assert 'tool_call_id "call_0" is used by 3 calls' in answer["warning"]
    for turn, tool in enumerate(("search", "読む", "fetch")):
        loaded = await _call(executor, "session_load", event_id=f"t{turn}", before=0, after=1)
        [anchor] = [m for m in loaded["messages"] if m["anchor"]]
        assert (anchor["event_id"], anchor["tool_name"]) == (f"t{turn}", tool)
        assert "tool_call_turns" not in loaded
    # An id of one call only answers as before: no turns listed.
    solo = {"id": "solo", "type": "function", "function": {"name": "fetch", "arguments": "{}"}}
    single = event(key, "a9", at=20, role="assistant", content=None, tool_calls=[solo])
    await store.events(single, event(key, "t9", at=21, role="tool", content="once", tool_call_id="solo"))
    once = await _call(executor, "session_load", tool_call_id="solo")
    assert once["anchor_event_id"] == "t9" and "tool_call_turns" not in once and "warning" not in once


async def test_a_fact_in_an_error_message_is_found_and_the_hit_loads_it(store: Store) -> None:
    """An error event without text shows its error (``type: …, message: …``): a fact in that message, short
    (primary stage) or deep in a long one (deep stage), ASCII or CJK, is found by ``session_search``, and the
    hit's event loads back as the request shows it."""
    rng = random.Random(9)
    key = SessionKey(APP, "oracle", "error-facts")
    records: list[dict[str, Any]] = [event(key, "u0", at=0, content="look these up")]
    planted: dict[str, str] = {}
    for i, (fact, size) in enumerate(
        zip(("pangolin 8812 ledger", "钥匙藏在第九号仓库南墙"), (200, 90_000), strict=True)
    ):
        filler = _text(rng, size)
        at = rng.randrange(len(filler) // 2, len(filler) - 10)
        while not is_boundary(filler, at):
            at += 1
        call = {"id": f"c{i}", "type": "function", "function": {"name": "fetch", "arguments": "{}"}}
        failed = event(key, f"t{i}", at=3 * i + 2, role="tool", content=None, tool_call_id=f"c{i}", name="fetch")
        failed["error"] = {"type": "tool_error", "message": f"{filler[:at]} {fact} {filler[at:]}"}
        records += [event(key, f"a{i}", at=3 * i + 1, role="assistant", content=None, tool_calls=[call]), failed]
        planted[fact] = f"t{i}"
    model = event(key, "x1", at=10, role="assistant", content=None)
    model["error"] = {"type": "model_error", "message": _text(rng, 50_000) + " upstream quota of 7731 tokens"}
    records.append(model)
    planted["quota of 7731"] = "x1"
    executor = await _projected_and_indexed(store, rng, records, key)
    for fact, event_id in planted.items():
        answer = await _call(executor, "session_search", query=fact, scope="current_session", top_k=3)
        hits = [h["event_id"] for h in answer["results"]]
        assert hits[:1] == [event_id], (fact, answer)
        text, _ = await load_whole(executor, event_id)
        ev = SessionEvent.model_validate(next(r for r in records if r["event_id"] == event_id))
        assert text == ev.shown_text and text.startswith("type: ") and fact in text
