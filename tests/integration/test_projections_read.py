"""Read rules against the real Cassandra: summaries, delta after a boundary, session_load, session_search."""

from __future__ import annotations

from typing import Any

import pytest

from projections import lexical, recall_search
from projections.cassandra_session import aexecute
from projections.errors import AnchorNotFound, InvalidRequest
from projections.event_windows import SkippedEvent
from schemas import SessionKey
from streams.context import AssembledRequest, AssemblyOptions, assemble
from tests.integration.test_projections_support import (
    Store,
    event,
    key,
    store,
    summary,
)

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="session")]
__all__ = ["key", "store"]


async def test_summary_fallback_order(store: Store, key: SessionKey) -> None:
    assert await store.reader.get_summary_text(key) is None
    await store.summaries(summary(key, 1, text="branch b", cutoff=5, last_event_id=None, filter_key="app/b"))
    # Nothing for "" or "app/a": any available summary is returned (the guide's last fallback).
    assert await store.reader.get_summary_text(key) == "branch b"
    assert await store.reader.get_summary_text(key, "app/a") == "branch b"
    await store.summaries(summary(key, 1, text="full", cutoff=3, last_event_id=None))
    assert await store.reader.get_summary_text(key, "app/a") == "full"
    assert await store.reader.get_summary_text(key, "app/b") == "branch b"
    assert await store.reader.get_summary_text(key) == "full"


async def test_newer_summary_never_overwritten_by_older(store: Store, key: SessionKey) -> None:
    s1 = summary(key, 1, text="v1", cutoff=1, last_event_id=None)
    s2 = summary(key, 2, text="v2", cutoff=2, last_event_id=None, prev=(1, None))
    await store.summaries(s2)
    await store.summaries(s1)
    await store.summaries(s2)
    latest = await store.reader.latest_summary(key)
    assert latest is not None and (latest.version, latest.summary) == (2, "v2")
    history = await store.reader.summary_history(key, "")
    assert [h.version for h in history] == [2, 1]


async def test_a_summary_takes_one_conditional_write_and_one_deletion_read_per_session(
    store: Store, key: SessionKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    """v1 inserts the head, v2 and v3 update it: a Paxos round each (v2 first tried the insert, refused)."""
    p = store.projector._p
    names = {id(p[n]): n for n in ("latest_insert", "latest_update", "select_deleted")}
    ran: list[str] = []
    run = store.projector._run

    async def counted(statement: object, params: object) -> object:
        ran.append(names.get(id(statement), "other"))
        return await run(statement, params)

    monkeypatch.setattr(store.projector, "_run", counted)
    await store.summaries(summary(key, 1, text="v1", cutoff=1, last_event_id=None))
    assert [n for n in ran if n != "other"] == ["select_deleted", "latest_insert"]
    ran.clear()
    await store.summaries(
        summary(key, 2, text="v2", cutoff=2, last_event_id=None, prev=(1, None)),
        summary(key, 3, text="v3", cutoff=3, last_event_id=None, prev=(2, None)),
    )
    assert [n for n in ran if n != "other"] == ["select_deleted", "latest_update", "latest_update"]
    latest = await store.reader.latest_summary(key)
    assert latest is not None and (latest.version, latest.summary) == (3, "v3")


async def test_events_after_event_id_boundary_is_exact(store: Store, key: SessionKey) -> None:
    # e2 and e3 share a timestamp; the boundary is e2 (arrival order), so e3 is after it.
    await store.events(event(key, "e1", at=1), event(key, "e2", at=2), event(key, "e3", at=2), event(key, "e4", at=3))
    await store.summaries(summary(key, 1, text="s", cutoff=2, last_event_id="e2"))
    after = await store.reader.events_after_boundary(key)
    assert [e.event_id for e in after] == ["e3", "e4"]


async def test_events_after_timestamp_only_boundary_keeps_same_timestamp(store: Store, key: SessionKey) -> None:
    await store.events(event(key, "e1", at=1), event(key, "e2", at=2), event(key, "e3", at=2), event(key, "e4", at=3))
    await store.summaries(summary(key, 1, text="s", cutoff=2, last_event_id=None))
    after = await store.reader.events_after_boundary(key)
    assert [e.event_id for e in after] == ["e2", "e3", "e4"]
    # An unknown last_event_id degrades to the timestamp rule too.
    await store.summaries(summary(key, 2, text="s2", cutoff=2, last_event_id="nope"))
    assert [e.event_id for e in await store.reader.events_after_boundary(key)] == ["e2", "e3", "e4"]


async def test_events_after_boundary_for_branch_key(store: Store, key: SessionKey) -> None:
    await store.events(
        event(key, "root", at=1, filter_key="app"),
        event(key, "plain", at=2),
        event(key, "b", at=3, filter_key="app/b"),
        event(key, "b-sub", at=4, filter_key="app/b/x"),
        event(key, "c", at=5, filter_key="app/c"),
        event(key, "b-partial", at=6, filter_key="app/b", partial=True),
    )
    after = await store.reader.events_after_boundary(key, "app/b")
    # The root agent's event (an ancestor's) is in the branch's input: the branch's prompt shows it.
    assert [e.event_id for e in after] == ["root", "plain", "b", "b-sub"]
    full = await store.reader.events_after_boundary(key, "")
    assert [e.event_id for e in full] == ["root", "plain", "b", "b-sub", "c"]
    await store.summaries(summary(key, 1, text="s", cutoff=3, last_event_id="b", filter_key="app/b"))
    assert [e.event_id for e in await store.reader.events_after_boundary(key, "app/b")] == ["b-sub"]


async def test_branch_key_without_its_own_summary_reads_its_subtree(store: Store, key: SessionKey) -> None:
    await store.events(
        event(key, "x1", at=1, content="outbound flight booked on TP1234", filter_key="trip/flights/out"),
        event(key, "y1", at=2, content="return flight booked on TP4321", filter_key="trip/flights/back"),
        event(key, "x2", at=5, content="outbound flight seat 12A confirmed", filter_key="trip/flights/out"),
        event(key, "h1", at=6, content="hotel flight transfer arranged", filter_key="trip/hotel"),
        event(key, "y2", at=7, content="return flight meal chosen", filter_key="trip/flights/back"),
    )
    await store.summaries(
        summary(key, 1, text="outbound: TP1234", cutoff=5, last_event_id="x2", filter_key="trip/flights/out"),
        summary(key, 1, text="return: TP4321", cutoff=2, last_event_id="y1", filter_key="trip/flights/back"),
    )
    # Display: the subtree's aggregate (the guide's order).
    assert await store.reader.get_summary_text(key, "trip/flights") == "return: TP4321\n\noutbound: TP1234"
    # Prompt: the descendants never saw events keyed trip/flights itself, so they do not stand for it.
    assert await store.reader.get_summary_view(key, "trip/flights") is None
    assert await store.reader.session_search(key, "flight booked", "current_hidden", filter_key="trip/flights") == []
    after = await store.reader.events_after_boundary(key, "trip/flights", summary=None, use_latest=False)
    assert [e.event_id for e in after] == ["x1", "y1", "x2", "y2"]
    # A child's own prompt still cuts at its own summary.
    own = await store.reader.get_summary_view(key, "trip/flights/out")
    assert own is not None and own.source == "exact" and own.last_event_id == "x2"
    # A sibling subtree: display falls back to any summary; its prompt takes none.
    assert await store.reader.get_summary_text(key, "trip/hotel") == "outbound: TP1234"
    assert await store.reader.get_summary_view(key, "trip/hotel") is None
    assert await store.reader.session_search(key, "flight", "current_hidden", filter_key="trip/hotel") == []


async def _prompt_from_cassandra(store: Store, key: SessionKey, filter_key: str) -> tuple[str, AssembledRequest]:
    view = await store.reader.get_summary_view(key, filter_key)
    rows = await store.reader.events_after_boundary(key, filter_key, summary=view, use_latest=False)
    opts = AssemblyOptions(add_session_summary=True, filter_key=filter_key)
    request = assemble("sys", view, [r.event() for r in rows], "what next?", options=opts)
    return "\n".join(str(m.get("content")) for m in request.messages), request


async def test_a_branch_agent_never_gets_an_unrelated_branch_summary(store: Store, key: SessionKey) -> None:
    # Issue 12 point 2: an agent on app/b with only app/a's summary stored got app/a's summary injected
    # and its own history cut at app/a's boundary.
    await store.events(
        event(key, "a1", at=1, content="branch a work MARK-A1", filter_key="app/a"),
        event(key, "b1", at=2, content="branch b question MARK-B1", filter_key="app/b"),
        event(key, "b2", at=3, role="assistant", content="branch b answer MARK-B2", filter_key="app/b"),
        event(key, "a2", at=4, content="branch a more MARK-A2", filter_key="app/a"),
        event(key, "b3", at=5, role="assistant", content="branch b later MARK-B3", filter_key="app/b"),
        event(key, "k1", at=6, role="assistant", content="shared note MARK-K1"),
    )
    await store.summaries(summary(key, 1, text="A SUMMARY MARK-A1 MARK-A2", cutoff=4, last_event_id="a2",
                                  filter_key="app/a"))  # fmt: skip
    text, request = await _prompt_from_cassandra(store, key, "app/b")
    assert "A SUMMARY" not in text and not request.report.summary_injected
    assert all(m in text for m in ("MARK-B1", "MARK-B2", "MARK-B3", "MARK-K1"))
    assert await store.reader.session_search(key, "branch b", "current_hidden", filter_key="app/b") == []
    # The display fallback keeps the guide's order (any available summary), documented as display only.
    assert await store.reader.get_summary_text(key, "app/b") == "A SUMMARY MARK-A1 MARK-A2"
    # A full-session agent with the cascade off (no "" summary) is not cut at a branch's boundary either.
    text, request = await _prompt_from_cassandra(store, key, "")
    assert not request.report.summary_injected
    assert all(m in text for m in ("MARK-A1", "MARK-A2", "MARK-B1", "MARK-B2", "MARK-B3", "MARK-K1"))

    # An ancestor's summary saw every app/b event: it stands for app/b and cuts at its boundary.
    await store.summaries(summary(key, 1, text="APP SUMMARY MARK-A1 MARK-B1 MARK-B2", cutoff=3, last_event_id="b2",
                                  filter_key="app"))  # fmt: skip
    text, request = await _prompt_from_cassandra(store, key, "app/b")
    assert "APP SUMMARY" in text and request.report.summary_injected
    assert "branch b question" not in text and all(m in text for m in ("MARK-B1", "MARK-B2", "MARK-B3", "MARK-K1"))
    hidden = await store.reader.session_search(key, "branch b question", "current_hidden", filter_key="app/b")
    assert "b1" in {h.event_id for h in hidden}


async def test_skip_summarization_events_are_visible_after_the_boundary_and_recallable_once_passed(
    store: Store, key: SessionKey
) -> None:
    await store.events(
        event(key, "u1", at=1, content="question MARK-1"),
        {**event(key, "d1", at=2, role="assistant", content="debug trace SKIP-1"), "skip_summarization": True},
        event(key, "a1", at=3, role="assistant", content="answer MARK-2"),
        {**event(key, "d2", at=4, role="assistant", content="debug trailing SKIP-2"), "skip_summarization": True},
    )
    await store.summaries(summary(key, 1, text="S MARK-1 MARK-2", cutoff=3, last_event_id="a1"))
    text, _ = await _prompt_from_cassandra(store, key, "")
    assert "SKIP-1" not in text and "SKIP-2" in text
    hidden = await store.reader.session_search(key, "debug trace", "current_hidden")
    assert "d1" in {h.event_id for h in hidden}
    window = await store.reader.session_load(key, event_id="d1")
    assert any(m.event_id == "d1" and "SKIP-1" in m.text for m in window.messages)


def _call(call_id: str, name: str) -> list[dict[str, object]]:
    return [{"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}]


async def _conversation(store: Store, key: SessionKey, big: str) -> None:
    await store.events(
        event(key, "u1", at=1, content="please look up the weather"),
        event(key, "a1", at=2, role="assistant", content=None, tool_calls=_call("call-1", "weather")),
        event(key, "t1", at=3, role="tool", content=big, tool_call_id="call-1"),
        event(key, "a2", at=4, role="assistant", content="It is sunny."),
        event(key, "p1", at=5, role="assistant", content="partial chunk", partial=True),
        event(key, "u2", at=6, content="thanks"),
        event(key, "a3", at=7, role="assistant", content="you are welcome"),
    )


async def test_session_load_window_and_anchor_errors(store: Store, key: SessionKey) -> None:
    await _conversation(store, key, "rain" * 10)
    r = await store.reader.session_load(key, event_id="a2")
    assert [m.event_id for m in r.messages] == ["t1", "a2", "u2"]  # a1 (tool call) and p1 (partial) skipped
    assert r.skipped == ()  # nothing complete lies between its messages (p1 is a streaming chunk)
    # The events a window passes over between its messages are named (a range walked window by window
    # reaches each); the tool call's event with its call ids.
    r = await store.reader.session_load(key, event_id="t1", before=1, after=0)
    assert [m.event_id for m in r.messages] == ["u1", "t1"]
    assert r.skipped == (SkippedEvent("a1", "assistant", ("call-1",)),)
    r = await store.reader.session_load(key, event_id="a2", before=0, after=2)
    assert (r.before, r.after) == (0, 2) and [m.event_id for m in r.messages] == ["a2", "u2", "a3"]
    r = await store.reader.session_load(key, event_id="u2", before=5, after=5)
    assert (r.before, r.after) == (2, 2)
    r = await store.reader.session_load(key, event_id="a2", before=0, after=0)
    assert (r.before, r.after) == (1, 1)
    r = await store.reader.session_load(key, tool_call_id="call-1", before=0, after=0)
    assert r.anchor_event_id == "t1"
    assert r.messages[1].tool_name == "weather" and r.messages[1].text.startswith("weather: rain")
    with pytest.raises(AnchorNotFound, match="anchor event not found: nope"):
        await store.reader.session_load(key, event_id="nope")
    # A tool-call event is an anchor by its event id (a cut marker may name it), never a neighbour.
    r = await store.reader.session_load(key, event_id="a1", before=1, after=2)
    assert [m.event_id for m in r.messages] == ["u1", "a1", "t1", "a2"]
    assert [(c.id, c.name, c.arguments) for c in r.messages[1].tool_calls] == [("call-1", "weather", "{}")]
    assert all(not m.tool_calls for m in r.messages if not m.is_anchor)
    with pytest.raises(AnchorNotFound, match="anchor event not found: p1"):
        await store.reader.session_load(key, event_id="p1")  # a streaming chunk: never loadable
    with pytest.raises(AnchorNotFound, match='tool_call_id "call-9" not found in session "s1"'):
        await store.reader.session_load(key, tool_call_id="call-9")
    with pytest.raises(InvalidRequest, match="event_id is required unless tool_call_id is provided"):
        await store.reader.session_load(key)
    # A stale event id falls back to the tool call id when both are given.
    r = await store.reader.session_load(key, event_id="gone", tool_call_id="call-1")
    assert r.anchor_event_id == "t1"


async def test_session_load_by_a_tool_call_id_whose_only_result_is_a_failed_tools_error(
    store: Store, key: SessionKey
) -> None:
    """A failed tool's error event without text is searchable by its error (``rows.recall_eligible``): a load
    by its call id anchors on it, as a load by its event id does, and a window shows it as a neighbour."""
    call = [{"id": "call-e", "type": "function", "function": {"name": "maps", "arguments": "{}"}}]
    failed = event(key, "t1", at=3, role="tool", content=None, tool_call_id="call-e")
    failed["error"] = {"type": "Timeout", "message": "maps timed out", "code": "504"}
    await store.events(
        event(key, "u1", at=1, content="where is it"),
        event(key, "a1", at=2, role="assistant", content=None, tool_calls=call),
        failed,
        event(key, "a2", at=4, role="assistant", content="the map service failed"),
    )
    by_id = await store.reader.session_load(key, event_id="t1", before=0, after=0)
    r = await store.reader.session_load(key, tool_call_id="call-e", before=0, after=0)
    assert r.anchor_event_id == "t1"
    anchor = next(m for m in r.messages if m.is_anchor)
    assert anchor.text == next(m for m in by_id.messages if m.is_anchor).text
    assert "maps timed out" in anchor.text
    r = await store.reader.session_load(key, event_id="a2", before=1, after=0)
    assert [m.event_id for m in r.messages] == ["t1", "a2"]
    assert "maps timed out" in r.messages[0].text


async def test_session_load_content_window_utf8(store: Store, key: SessionKey) -> None:
    big = "é" * 50_000  # 100 000 bytes, every character 2 bytes
    await _conversation(store, key, big)
    r = await store.reader.session_load(key, tool_call_id="call-1", after=0, before=1)
    anchor = next(m for m in r.messages if m.is_anchor)
    assert anchor.content_bytes == 100_000 and anchor.returned_bytes == 16 * 1024 and anchor.content_truncated
    r = await store.reader.session_load(key, tool_call_id="call-1", content_offset=1001, content_limit=1_000_000)
    anchor = next(m for m in r.messages if m.is_anchor)
    assert anchor.content_offset == 1000 and anchor.returned_bytes == 64 * 1024
    assert anchor.text == "é" * (32 * 1024)
    r = await store.reader.session_load(key, event_id="u1", before=0, after=2, content_limit=11)
    neighbour = next(m for m in r.messages if m.event_id == "t1")
    assert neighbour.returned_bytes == 10 and neighbour.content_truncated


async def test_session_search_scopes(store: Store, key: SessionKey) -> None:
    other = SessionKey(key.app_name, key.user_id, "s2")
    stranger = SessionKey(key.app_name, "u2", "s1")
    await store.events(
        event(key, "h1", at=1, content="We chose PostgreSQL for the billing database"),
        event(key, "h2", at=2, role="assistant", content=None, tool_calls=_call("c1", "db")),
        event(key, "h3", at=3, role="tool", content="postgresql 16 cluster ready", tool_call_id="c1"),
        event(key, "v1", at=10, content="the billing database migration is still pending"),
        event(other, "o1", at=1, content="billing database moved to PostgreSQL in session two"),
        event(stranger, "x1", at=1, content="billing database PostgreSQL secret of another user"),
    )
    # No summary yet: nothing is hidden.
    assert await store.reader.session_search(key, "billing database", "current_hidden") == []
    await store.summaries(summary(key, 1, text="s", cutoff=3, last_event_id="h3"))
    hidden = await store.reader.session_search(key, "billing database", "current_hidden")
    assert [h.event_id for h in hidden] == ["h1"]
    assert "[match] user: We chose PostgreSQL" in hidden[0].context
    session = await store.reader.session_search(key, "billing database", "current_session")
    assert {h.event_id for h in session} == {"h1", "v1"}
    tool = await store.reader.session_search(key, "postgresql cluster", "current_session")
    assert tool[0].event_id == "h3" and tool[0].role == "tool"
    others = await store.reader.session_search(key, "billing database", "other_sessions")
    assert [(h.session_id, h.event_id) for h in others] == [("s2", "o1")]
    everything = await store.reader.session_search(key, "billing database", "all_sessions")
    assert {(h.scope, h.event_id) for h in everything} == {("current_hidden", "h1"), ("other_sessions", "o1")}
    assert await store.reader.session_search(key, "   ", "all_sessions") == []
    unknown = await store.reader.session_search(key, "billing database", "bogus")
    assert [h.event_id for h in unknown] == ["h1"]


def _record_statements(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[Any, ...]]]:
    """The ``(CQL, parameters)`` of every statement the read API sends from now on."""
    sent: list[tuple[str, tuple[Any, ...]]] = []

    def recording(session: Any, statement: Any, params: Any = None, **kwargs: Any) -> Any:
        sent.append((statement.query_string, tuple(params or ())))
        return aexecute(session, statement, params, **kwargs)

    monkeypatch.setattr(recall_search, "aexecute", recording)
    return sent


async def test_other_sessions_are_found_when_the_own_session_holds_most_matches(
    store: Store, key: SessionKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    """other_sessions reads the tenant in one statement and drops the own session's rows; when those fill a
    page (45 matches in s1, sorted before s9 in the tenant partition), it keeps the page's earlier sessions
    (s0) and reads the sessions after s1 in one more statement: the page, in clustering order, already
    holds every match before s1, so no slice before the session is sent."""
    other = SessionKey(key.app_name, key.user_id, "s9")
    early = SessionKey(key.app_name, key.user_id, "s0")
    await store.events(
        *(event(key, f"own{i}", at=i, content=f"billing invoice number {i}") for i in range(45)),
        event(other, "o1", at=1, content="the billing invoice of session nine"),
        event(early, "e1", at=1, content="an early billing invoice"),
    )
    sent = _record_statements(monkeypatch)
    hits = await store.reader.session_search(key, "billing invoice", "other_sessions", top_k=5)
    assert {(h.session_id, h.event_id) for h in hits} == {("s9", "o1"), ("s0", "e1")}
    assert any("session_id >" in q for q, _ in sent) and not any("session_id <" in q for q, _ in sent)
    # A tenant the own session does not crowd: one statement per table, no slices.
    sent.clear()
    hits = await store.reader.session_search(SessionKey(key.app_name, key.user_id, "s0"), "billing invoice",
                                             "other_sessions", top_k=5)  # fmt: skip
    assert {h.session_id for h in hits} == {"s1"}  # s1's matches fill the page before s9's (the LIMIT)
    assert sent and not any("session_id <" in q or "session_id >" in q for q, _ in sent)


async def test_session_search_broadens_compound_questions(store: Store, key: SessionKey) -> None:
    await store.events(
        event(key, "d1", at=1, content="deployment to kubernetes failed twice"),
        event(key, "d2", at=2, role="assistant", content="the invoice total was 420 euros"),
        event(key, "d3", at=3, content="unrelated chatter about lunch"),
    )
    hits = await store.reader.session_search(
        key, "what did we decide about the kubernetes deployment, and the invoice total?", "current_session"
    )
    assert {h.event_id for h in hits} == {"d1", "d2"}
    assert all(h.score >= 0.45 for h in hits)
    assert len(await store.reader.session_search(key, "lunch", "current_session", top_k=50)) == 1


async def test_term_probes_read_the_later_chunks_only_for_terms_the_first_chunks_lack(
    store: Store, key: SessionKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The presence probes of a wide question: a term in a first chunk costs one probe, a term only deep in a
    long tool result (or in CJK text) is still found present, an absent term is absent from both tables."""
    filler = " ".join(f"row {i} status nominal" for i in range(600))  # ~12 KB: later chunks
    await store.events(
        event(key, "u1", at=1, content="check the cache warmup"),
        event(key, "a1", at=2, role="assistant", content=None, tool_calls=_call("c1", "ledger")),
        event(key, "t1", at=3, role="tool", content=filler[:10_000] + " zanzibar 退款编号 " + filler,
              tool_call_id="c1", name="ledger"),
    )  # fmt: skip
    sent = _record_statements(monkeypatch)
    [cache] = lexical.plan("cache")[0].index_terms
    [deep] = lexical.plan("zanzibar")[0].index_terms
    [cjk] = lexical.plan("退款编号")[0].index_terms[:1]
    for session_id in (key.session_id, None):
        sent.clear()
        absent = await store.reader._absent_terms(key, [cache, deep, cjk, "nowherezq"], session_id)
        assert absent == {"nowherezq"}
        probed = {table: [p[-1] for q, p in sent if f".{table} " in q] for table in ("recall_docs", "recall_chunks")}
        assert sorted(probed["recall_docs"]) == sorted([cache, deep, cjk, "nowherezq"])
        assert sorted(probed["recall_chunks"]) == sorted([deep, cjk, "nowherezq"])  # not the first-chunk term


async def test_search_finds_a_detail_deep_inside_a_long_tool_result(store: Store, key: SessionKey) -> None:
    # Issue 12 point 5: only the first 8 KiB of a document was indexed; compaction hides exactly the rest.
    filler = " ".join(f"row {i} status nominal" for i in range(600))  # ~12 KB
    latin = filler[:10_000] + " refund reference ZX9041 approved by finance " + filler
    cjk_filler = "".join(chr(0x4E00 + (i * 7) % 3000) for i in range(4000))
    chinese = cjk_filler + "退款编号九零四一已经批准" + cjk_filler
    await store.events(
        event(key, "u1", at=1, content="look up the refunds"),
        event(key, "a1", at=2, role="assistant", content=None, tool_calls=_call("c1", "ledger")),
        event(key, "t1", at=3, role="tool", content=latin, tool_call_id="c1", name="ledger"),
        event(key, "a2", at=4, role="assistant", content=None, tool_calls=_call("c2", "ledger_zh")),
        event(key, "t2", at=5, role="tool", content=chinese, tool_call_id="c2", name="ledger_zh"),
        event(key, "a3", at=6, role="assistant", content="done"),
    )
    hits = await store.reader.session_search(key, "refund reference ZX9041", "current_session")
    assert [h.event_id for h in hits][:1] == ["t1"]
    assert hits[0].content_bytes == len(latin.encode())
    zh = await store.reader.session_search(key, "退款编号", "current_session")
    assert [h.event_id for h in zh][:1] == ["t2"]
    # Behind a summary boundary the same detail is found in current_hidden.
    await store.summaries(summary(key, 1, text="refunds looked up", cutoff=6, last_event_id="a3"))
    hidden = await store.reader.session_search(key, "ZX9041 approved", "current_hidden")
    assert "t1" in {h.event_id for h in hidden}
    # A deleted session leaves no chunk behind.
    await store.events({"type": "delete_session", "command_id": "d1", "app_name": key.app_name,
                        "user_id": key.user_id, "session_id": key.session_id})  # fmt: skip
    rows = store.session.execute(f"SELECT count(*) FROM {store.settings.cassandra.keyspace}.recall_chunks")
    assert int(rows.one()[0]) == 0
