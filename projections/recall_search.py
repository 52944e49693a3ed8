"""Recall search: ``session_search`` over the tenant's indexed documents (lexical, optionally hybrid).

The index is written by :mod:`projections.indexer` (``recall_docs``, ``recall_chunks``,
``recall_lines``, vectors); see :mod:`projections.lexical` for the tokens and the
broadening plan.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from cassandra.cluster import Session

from projections import lexical
from projections.cassandra_session import aexecute
from projections.embedding import MAX_EMBED_CHARS, Embedder
from projections.filter_keys import in_summary_input
from projections.snippets import context_window, excerpt
from projections.statements import vector_table
from projections.summary_reads import SESSION_PK, SummaryReads, _cut, _heads, _utc
from projections.summary_selection import (
    select_hidden,
)
from schemas import SessionKey

Scope = Literal["current_hidden", "current_session", "other_sessions", "all_sessions"]
SCOPES: tuple[Scope, ...] = ("current_hidden", "current_session", "other_sessions", "all_sessions")
DEFAULT_TOP_K = 5
MAX_TOP_K = 10
_DOC_COLS = "session_id, ts, event_id, seq, filter_key, role, text, tool_call_id, tool_name, content_bytes"
_DOC_TABLES = ("recall_docs", "recall_chunks")
"""Where a document's indexed chunks live: the first in ``recall_docs``, the rest in ``recall_chunks``."""
_FIRST_CHUNKS = ("recall_docs",)
_LATER_CHUNKS = ("recall_chunks",)
SNIPPET_CHARS = 280
"""Characters of a hit's snippet (its context window for the best two hits)."""
MATCH_LINE_CHARS = 140
"""Characters of the hit's own line in its context window (the text around the match); the neighbours share the rest."""
MAX_PLAN = 6
"""Broadening cap: at most this many queries of a plan run (the strictest first)."""
MAX_TERMS = 8
"""At most this many index terms per query (the first ones)."""
_WIDE_QUERY = 3
"""Queries with more terms than this have their terms probed for absence first (see ``_lexical``)."""


@dataclass(frozen=True)
class SearchHit:
    """One session_search result."""

    scope: str
    session_id: str
    event_id: str
    created: datetime
    role: str
    score: float
    snippet: str
    context: str = ""
    filter_key: str = ""
    tool_call_id: str | None = None
    tool_name: str | None = None
    content_bytes: int = 0
    content_truncated: bool = False


@dataclass
class _Doc:
    session_id: str
    ts: datetime
    event_id: str
    seq: int
    filter_key: str
    role: str
    text: str
    tool_call_id: str | None
    tool_name: str | None
    content_bytes: int
    chunk: int = 0
    """0: the document's first chunk (``recall_docs``); n ≥ 1: its ``recall_chunks`` row n."""
    score: float = 0.0
    sources: set[str] = field(default_factory=set)


_Accept = Callable[[_Doc], bool]


class RecallSearch(SummaryReads):
    """``session_search`` (the guide's tool) on :class:`SummaryReads` (a hidden scope needs the summary's cut)."""

    def __init__(self, session: Session, keyspace: str, *, embedder: Embedder | None = None) -> None:
        super().__init__(session, keyspace, embedder=embedder)
        pk, ks = SESSION_PK, keyspace
        self._summary_cuts = self._prep(
            f"SELECT filter_key, summary, cutoff_at, last_event_id FROM {ks}.summaries_latest WHERE {pk}"
        )
        self._line_before = self._prep(
            f"SELECT role, line FROM {ks}.recall_lines WHERE {pk} AND (ts, event_id) < (?, ?) "
            "ORDER BY ts DESC, event_id DESC LIMIT 2"
        )
        self._line_after = self._prep(
            f"SELECT role, line FROM {ks}.recall_lines WHERE {pk} AND (ts, event_id) > (?, ?) LIMIT 2"
        )
        self._first_chunk = self._prep(f"SELECT seq FROM {ks}.recall_docs WHERE {pk} AND ts = ? AND event_id = ?")

    async def session_search(
        self,
        key: SessionKey,
        query: str,
        scope: str = "current_hidden",
        top_k: int | None = None,
        *,
        filter_key: str = "",
        min_score: float = lexical.MIN_SCORE,
        mode: Literal["lexical", "hybrid"] = "hybrid",
    ) -> list[SearchHit]:
        """Search user/assistant messages and tool results of this tenant (the guide's ``session_search``).

        Scopes (unknown → ``current_hidden``): ``current_hidden`` only what the
        current summary of ``filter_key`` (else the full-session summary)
        hides, up to and including its boundary (no summary → no results);
        ``current_session`` the whole current session; ``other_sessions`` the
        tenant's other sessions; ``all_sessions`` = current_hidden +
        other_sessions. ``top_k`` defaults to 5, at most 10. Lexical search
        with query broadening always runs; with an embedder and ``mode=
        "hybrid"`` vector hits (cosine ``ANN OF``) are merged, a document
        scoring the better of the two. Sorted by score, then newest.

        Latency: the scopes of ``all_sessions`` and the summary lookup of
        ``current_hidden`` run concurrently with the queries; the queries of
        a broadening plan go out one by one as the answer still needs them
        (the first with the probes that decide the second); see ``_lexical``.
        """
        k = DEFAULT_TOP_K if top_k is None or top_k <= 0 else min(top_k, MAX_TOP_K)
        if not query.strip():
            return []
        chosen: Scope = scope if scope in SCOPES else "current_hidden"
        labels: list[str] = []
        searches: list[Awaitable[list[_Doc]]] = []
        if chosen in ("current_hidden", "all_sessions"):
            labels.append("current_hidden")
            searches.append(self._search_hidden(key, query, k, filter_key, min_score, mode))
        if chosen == "current_session":
            labels.append("current_session")
            searches.append(self._search_docs(key, query, k, min_score, mode, session_id=key.session_id,
                            accept=_ready(lambda d: in_summary_input(d.filter_key, filter_key))))  # fmt: skip
        if chosen in ("other_sessions", "all_sessions"):
            labels.append("other_sessions")
            others = _ready(lambda d: d.session_id != key.session_id)
            searches.append(self._search_docs(key, query, k, min_score, mode, session_id=None,
                                              exclude=key.session_id, accept=others))  # fmt: skip
        parts = zip(labels, await asyncio.gather(*searches), strict=True)
        seen: set[tuple[str, str]] = set()
        ranked: list[tuple[str, _Doc]] = []
        for label, docs in parts:
            for d in docs:
                if (d.session_id, d.event_id) not in seen:
                    seen.add((d.session_id, d.event_id))
                    ranked.append((label, d))
        ranked.sort(key=lambda x: (-x[1].score, -x[1].ts.timestamp(), x[1].event_id))
        top = await self._indexed(key, ranked, k)
        contexts = await asyncio.gather(*(self._context(key, d, query) for _, d in top[:2]))
        hits = []
        for i, (label, d) in enumerate(top):
            ctx = contexts[i] if i < len(contexts) else ""
            snippet = ctx or excerpt(d.text, query, SNIPPET_CHARS)
            hits.append(
                SearchHit(
                    scope=label,
                    session_id=d.session_id,
                    event_id=d.event_id,
                    created=d.ts,
                    role=d.role,
                    score=round(d.score, 4),
                    snippet=snippet,
                    context=ctx,
                    filter_key=d.filter_key,
                    tool_call_id=d.tool_call_id,
                    tool_name=d.tool_name,
                    content_bytes=d.content_bytes,
                    content_truncated=len(" ".join(d.text.split())) > SNIPPET_CHARS,
                )
            )
        return hits

    async def _indexed(self, key: SessionKey, ranked: list[tuple[str, _Doc]], k: int) -> list[tuple[str, _Doc]]:
        """The first ``k`` of ``ranked`` but the later chunks whose document's first chunk is not in the index.

        The deep indexing stage writes a long document's later chunks behind the
        primary stage, which removes a deleted session's rows: a later chunk it
        wrote for an event a deletion removed meanwhile is removed again right
        after its write (``projections.indexer``), and until then this keeps
        it out of the answer. A point read per such hit in the answer, only for
        the hits the first chunks did not find (``_Doc.chunk`` > 0).
        """
        checked: set[tuple[str, str]] = set()
        gone: set[tuple[str, str]] = set()
        while True:
            top = [(label, d) for label, d in ranked if (d.session_id, d.event_id) not in gone][:k]
            later = [d for _, d in top if d.chunk > 0 and (d.session_id, d.event_id) not in checked]
            if not later:
                return top
            found = await asyncio.gather(*(aexecute(self._s, self._first_chunk, (key.app_name, key.user_id,
                                           d.session_id, d.ts, d.event_id)) for d in later))  # fmt: skip
            for d, rows in zip(later, found, strict=True):
                checked.add((d.session_id, d.event_id))
                if not list(rows):
                    gone.add((d.session_id, d.event_id))

    async def _search_hidden(
        self, key: SessionKey, query: str, k: int, filter_key: str, min_score: float, mode: str
    ) -> list[_Doc]:
        async def accept() -> _Accept | None:
            rows = _heads(await aexecute(self._s, self._summary_cuts, tuple(key)))
            chosen = select_hidden((_cut(r) for r in rows), filter_key)
            if chosen is None:
                return None  # no summary hides anything
            cut = await self.resolve_cut(key, chosen.cutoff_at, chosen.last_event_id)
            return lambda d: in_summary_input(d.filter_key, filter_key) and cut.is_hidden(d.ts, d.seq)

        # The documents are fetched while the summary and its boundary are looked up.
        return await self._search_docs(key, query, k, min_score, mode, session_id=key.session_id, accept=accept())

    async def _search_docs(
        self, key: SessionKey, query: str, k: int, min_score: float, mode: str, *, session_id: str | None,
        accept: Awaitable[_Accept | None], exclude: str | None = None,
    ) -> list[_Doc]:  # fmt: skip
        """Lexical (and semantic) hits in ``session_id`` (``None``: the tenant, minus ``exclude``).

        ``accept`` resolves to the document filter, or ``None`` for "nothing
        can match"; the queries are already in flight while it resolves.
        """
        gate = asyncio.ensure_future(accept)
        found: dict[tuple[str, str], _Doc] = {}
        jobs = [self._lexical(key, query, k, min_score, session_id, exclude, gate, found)]
        if self._embedder is not None and mode == "hybrid":
            jobs.append(self._semantic(key, query, k, session_id, gate, found))
        await asyncio.gather(*jobs)
        return sorted(found.values(), key=lambda d: (-d.score, -d.ts.timestamp()))[: max(k, 1) * 2]

    async def _lexical(
        self, key: SessionKey, query: str, k: int, min_score: float, session_id: str | None, exclude: str | None,
        gate: asyncio.Future[_Accept | None], found: dict[tuple[str, str], _Doc],
    ) -> None:  # fmt: skip
        """The broadening plan (at most ``MAX_PLAN`` queries), applied in plan order with the sequential stop rules.

        A query goes out only when the answer still needs it: on a loaded
        box every statement is CPU taken from the searches beside it, and a
        query of the benchmark's corpus reads its 40 candidate rows at ~0.25
        ms of Cassandra CPU each (the ``tokens`` set of every row is read to
        post-filter it). The one exception, for latency: the first narrow
        query goes out at once, beside the probes that decide whether a wide
        first query (the whole question) runs. SAI intersects at most two
        ``CONTAINS`` clauses through the index and filters the rest row by
        row, so a query of 4+ terms that matches nothing reads every row
        holding its two chosen terms (60-160 ms at 100k events). Such a query
        is skipped when one of its terms is absent from the scope: a term of
        a query that found rows is present; the others are probed (``LIMIT
        1``, ~1 ms) when the query's turn comes.

        Each query reads the first chunks (``recall_docs``); the later chunks
        of long documents (``recall_chunks``) only when the answer is still
        short of ``k`` documents after it — a detail deep in a tool result is
        found, and a search that the first chunks answer costs what it did.
        """
        plan = lexical.plan(query)[:MAX_PLAN]
        if not plan:
            return
        compound = lexical.is_compound(query)
        enough = k if compound else min(2, k)
        limit = max(40, k * 8)

        def terms_of(i: int) -> tuple[str, ...]:
            return plan[i].index_terms[:MAX_TERMS]

        def wide(i: int) -> bool:
            return len(terms_of(i)) > _WIDE_QUERY

        def start(i: int) -> None:
            pending[i] = asyncio.ensure_future(
                self._fetch_terms(key, plan[i].index_terms, session_id, exclude, limit, tables=_FIRST_CHUNKS)
            )

        def start_deep(i: int) -> None:
            deep[i] = asyncio.ensure_future(
                self._fetch_terms(key, plan[i].index_terms, session_id, exclude, max(10, 2 * k), tables=_LATER_CHUNKS)
            )

        present: set[str] = set()
        absent: set[str] = set()

        async def runs(i: int) -> bool:
            """Whether ``plan[i]`` runs: a narrow query always, a wide one unless one of its terms is absent."""
            terms = terms_of(i)
            if not wide(i) or not absent.isdisjoint(terms):
                return not wide(i)
            unknown = [t for t in terms if t not in present]
            gone = await self._absent_terms(key, unknown, session_id)
            absent.update(gone)
            present.update(t for t in unknown if t not in gone)
            return not gone

        pending: dict[int, asyncio.Future[list[_Doc]]] = {}
        deep: dict[int, asyncio.Future[list[_Doc]]] = {}
        first = next((i for i in range(len(plan)) if not wide(i)), None)
        if first is not None:
            start(first)
        if wide(0):
            absent |= await self._absent_wide_terms(key, plan, [0], pending, session_id)
            if absent.isdisjoint(terms_of(0)):
                present.update(terms_of(0))
        try:
            accept = await gate
            if accept is None:
                return
            prepared: dict[tuple[str, str, int], lexical.ScoredText] = {}
            for i in range(len(plan)):
                if self._count(found, "lexical") >= enough:
                    break
                if not await runs(i):
                    continue
                if i not in pending:
                    start(i)
                docs = await pending.pop(i)
                if docs:
                    present.update(terms_of(i))  # every row holds every term
                for doc in docs:
                    self._score(found, prepared, plan[i], doc, accept, min_score)
                if self._count(found, "lexical") < k:
                    # The first chunks do not fill the answer: look into the rest of long documents, for
                    # this query and one already on its way.
                    for j in (i, *pending):
                        if j not in deep:
                            start_deep(j)
                    for doc in await deep.pop(i):
                        self._score(found, prepared, plan[i], doc, accept, min_score)
        finally:
            for f in (*pending.values(), *deep.values()):
                f.cancel()
        if not found:
            # Last resort: any single keyword (OR semantics), scored against the whole query.
            whole = plan[0]
            terms = [t for t in whole.index_terms[:MAX_TERMS] if t not in absent]
            singles = await asyncio.gather(
                *(self._fetch_terms(key, (t,), session_id, exclude, max(20, k * 4)) for t in terms)
            )
            for docs in singles:
                for doc in docs:
                    self._score(found, prepared, whole, doc, accept, min_score)

    def _score(
        self, found: dict[tuple[str, str], _Doc], prepared: dict[tuple[str, str, int], lexical.ScoredText],
        lq: lexical.LexicalQuery, doc: _Doc, accept: _Accept, min_score: float,
    ) -> None:  # fmt: skip
        if not accept(doc):
            return
        ident = (doc.session_id, doc.event_id, doc.chunk)
        text = prepared.get(ident)
        if text is None:
            text = prepared[ident] = lexical.ScoredText(doc.text)
        value = lexical.score(lq, text)
        if value >= min_score:
            self._merge(found, doc, value, "lexical")

    async def _absent_wide_terms(
        self, key: SessionKey, plan: Sequence[lexical.LexicalQuery], wide: Sequence[int],
        pending: dict[int, asyncio.Future[list[_Doc]]], session_id: str | None,
    ) -> set[str]:  # fmt: skip
        """The terms of the ``wide`` queries of ``plan`` that no document of the scope holds.

        A term of a narrow query already in flight (``pending``) is not probed:
        that query finding a row shows every one of its terms present. The
        other terms are probed first; only when a wide query is not already
        ruled out by them are the queries covering its other terms awaited
        (their answers are needed anyway), and their terms probed when they
        found nothing. A compound question's clauses usually cover all of its
        terms but one, so this spares most of the probes of ``_absent_terms``.
        """
        terms = list(dict.fromkeys(t for i in wide for t in plan[i].index_terms[:MAX_TERMS]))
        covering = {t: [i for i in pending if t in plan[i].index_terms[:MAX_TERMS]] for t in terms}
        absent = await self._absent_terms(key, [t for t in terms if not covering[t]], session_id)
        open_terms = {t for i in wide if absent.isdisjoint(plan[i].index_terms[:MAX_TERMS])
                      for t in plan[i].index_terms[:MAX_TERMS] if covering[t]}  # fmt: skip
        unknown: list[str] = []
        for t in sorted(open_terms):
            found = False
            for i in covering[t]:
                found = found or bool(await asyncio.shield(pending[i]))
            if not found:
                unknown.append(t)
        return absent | await self._absent_terms(key, unknown, session_id)

    async def _absent_terms(self, key: SessionKey, terms: Sequence[str], session_id: str | None) -> set[str]:
        """Which of ``terms`` no document of the scope holds in any chunk (concurrent ``LIMIT 1`` probes).

        The first chunks are probed first, and only the terms they lack are probed in the later
        chunks: most terms of a question are in some first chunk, and each probe is a statement
        (~2 ms of Cassandra CPU) taken from the searches beside it.
        """
        unique = list(dict.fromkeys(terms))
        if not unique:
            return set()
        where = "app_name = ? AND user_id = ?"
        params: tuple[str, ...] = (key.app_name, key.user_id)
        if session_id is not None:
            where += " AND session_id = ? AND tokens CONTAINS ?"
            params += (session_id, lexical.session_token(session_id))
        missing = unique
        for table in _DOC_TABLES:
            stmt = await self._prep_async(
                f"SELECT event_id FROM {self._ks}.{table} WHERE {where} AND tokens CONTAINS ? LIMIT 1"
            )
            found = await asyncio.gather(*(aexecute(self._s, stmt, (*params, t)) for t in missing))
            missing = [t for t, rows in zip(missing, found, strict=True) if not list(rows)]
            if not missing:
                break
        return set(missing)

    @staticmethod
    def _count(found: dict[tuple[str, str], _Doc], source: str) -> int:
        return sum(1 for d in found.values() if source in d.sources)

    @staticmethod
    def _merge(found: dict[tuple[str, str], _Doc], doc: _Doc, value: float, source: str) -> None:
        current = found.get((doc.session_id, doc.event_id))
        if current is None:
            doc.score = value
            doc.sources.add(source)
            found[(doc.session_id, doc.event_id)] = doc
        else:
            if value > current.score and doc.chunk != current.chunk:
                current.text, current.chunk = doc.text, doc.chunk  # the snippet shows the best-matching chunk
            current.score = max(current.score, value)
            current.sources.add(source)

    async def _fetch_terms(
        self, key: SessionKey, terms: Sequence[str], session_id: str | None, exclude: str | None, limit: int,
        *, tables: Sequence[str] = _DOC_TABLES,
    ) -> list[_Doc]:  # fmt: skip
        """Chunks holding every one of ``terms`` (the first ``MAX_TERMS``), at most ``limit`` per table.

        ``tables``: ``recall_docs`` (first chunks) and/or ``recall_chunks``
        (the rest of long documents), read concurrently; one document may
        answer with several chunks (the caller keeps its best score). With ``exclude``
        (and no ``session_id``) the tenant partition is read whole and that
        session's rows are dropped; only when they took up more than a quarter
        of a full page (a tenant whose own session holds most matches) is that
        table read again, from after the session. One statement instead of
        two: each SAI statement costs ~2 ms of Cassandra CPU before its rows.

        Why the slice after the session is enough: a partition's rows come in
        clustering order (``session_id`` first), so a page that reached the own
        session already holds every match of the sessions sorted before it. A
        slice before the session would find nothing new and still cost what the
        whole partition's postings cost to step over (20-27 ms at 100k events).
        """
        terms = list(terms)[:MAX_TERMS]
        if not terms:
            return []
        if session_id is not None:
            # Implied by ``session_id = ?``, but SAI does not narrow by the clustering key: with the session's
            # own token it intersects the term's postings with the session's instead of stepping over every
            # earlier session's matches in the tenant partition (see ``lexical.session_token``).
            terms = [lexical.session_token(session_id), *terms]
        base = "app_name = ? AND user_id = ?"
        contains = "".join(" AND tokens CONTAINS ?" for _ in terms)
        where = base + (" AND session_id = ?" if session_id is not None else "")
        params: list[Any] = [key.app_name, key.user_id] + ([session_id] if session_id is not None else [])
        pages = await self._read_pages(tables, f"{where}{contains}", (*params, *terms, limit))
        if exclude is None:
            return [_doc(r) for rows in pages for r in rows]
        out: list[_Doc] = []
        crowded: list[str] = []
        for table, rows in zip(tables, pages, strict=True):
            own = sum(1 for r in rows if r.session_id == exclude)
            if len(rows) >= limit and own * 4 > limit:
                crowded.append(table)
                out.extend(_doc(r) for r in rows if r.session_id < exclude)  # the slice brings those after it
            else:
                out.extend(_doc(r) for r in rows if r.session_id != exclude)
        if crowded:
            where = f"{base} AND session_id > ?{contains}"
            for rows in await self._read_pages(crowded, where, (key.app_name, key.user_id, exclude, *terms, limit)):
                out.extend(_doc(r) for r in rows)
        return out

    async def _read_pages(self, tables: Sequence[str], where: str, values: tuple[Any, ...]) -> list[Any]:
        """The rows of ``SELECT <doc columns> FROM <table> WHERE <where> LIMIT ?`` for each of ``tables``, at once."""
        stmts = await asyncio.gather(*(
            self._prep_async(f"SELECT {_DOC_COLS}{', chunk' if table == 'recall_chunks' else ''} FROM "
                             f"{self._ks}.{table} WHERE {where} LIMIT ?") for table in tables
        ))  # fmt: skip
        return list(await asyncio.gather(*(aexecute(self._s, stmt, values) for stmt in stmts)))

    async def _semantic(
        self, key: SessionKey, query: str, k: int, session_id: str | None, gate: asyncio.Future[_Accept | None],
        found: dict[tuple[str, str], _Doc],
    ) -> None:  # fmt: skip
        assert self._embedder is not None
        [vector] = await self._embedder.embed([query[:MAX_EMBED_CHARS]])
        table = vector_table(self._embedder.dimensions)
        where = "app_name = ? AND user_id = ?" + (" AND session_id = ?" if session_id is not None else "")
        stmt = await self._prep_async(
            f"SELECT session_id, ts, event_id, similarity_cosine(embedding, ?) AS score FROM {self._ks}.{table} "
            f"WHERE {where} ORDER BY embedding ANN OF ? LIMIT ?"
        )
        params: list[Any] = [vector, key.app_name, key.user_id]
        if session_id is not None:
            params.append(session_id)
        rows = list(await aexecute(self._s, stmt, (*params, vector, k * 4)))
        docs_stmt = await self._prep_async(
            f"SELECT {_DOC_COLS} FROM {self._ks}.recall_docs WHERE app_name = ? AND user_id = ? AND session_id = ? "
            "AND ts = ? AND event_id = ?"
        )
        fetched = await asyncio.gather(
            *(aexecute(self._s, docs_stmt, (key.app_name, key.user_id, r.session_id, r.ts, r.event_id)) for r in rows)
        )
        accept = await gate
        if accept is None:
            return
        for r, doc_rows in zip(rows, fetched, strict=True):
            doc_row = next(iter(doc_rows), None)
            if doc_row is None:
                continue
            doc = _doc(doc_row)
            if accept(doc):
                self._merge(found, doc, float(r.score), "semantic")

    async def _context(self, key: SessionKey, doc: _Doc, query: str) -> str:
        """Lines ``role: text`` of a 2/2 window around ``doc``, the hit marked ``[match]``, ≤ 280 characters.

        The hit's line is the text around the query's keywords (``snippets.excerpt``:
        a fact deep in a large tool result shows, not the chunk's first characters),
        kept whole; the neighbours share what is left.

        The neighbours come from ``recall_lines``: a row per ``recall_docs``
        row (exactly the loadable events: the window rule of
        ``session_load``) holding its line, made from the same first 8 Ki
        characters, in a partition of the hit's session. Two ``LIMIT 2``
        slices of it replace an anchor lookup and two pages of full events
        (50 KB tool results included), and read a hundred bytes a neighbour
        where the same slices of ``recall_docs`` read its text and every
        cell of its token set.
        """
        params = (key.app_name, key.user_id, doc.session_id, doc.ts, doc.event_id)
        earlier, later = await asyncio.gather(
            aexecute(self._s, self._line_before, params), aexecute(self._s, self._line_after, params)
        )
        before = [f"{r.role}: {r.line or lexical.context_line('')}" for r in reversed(list(earlier))]
        match = f"[match] {doc.role}: {excerpt(doc.text, query, MATCH_LINE_CHARS)}"
        after = [f"{r.role}: {r.line or lexical.context_line('')}" for r in later]
        return context_window(before, match, after, SNIPPET_CHARS)


def _ready(accept: _Accept) -> asyncio.Future[_Accept | None]:
    fut: asyncio.Future[_Accept | None] = asyncio.get_running_loop().create_future()
    fut.set_result(accept)
    return fut


def _doc(row: Any) -> _Doc:
    return _Doc(
        session_id=row.session_id, ts=_utc(row.ts), event_id=row.event_id, seq=row.seq,
        filter_key=row.filter_key or "", role=row.role, text=row.text or "", tool_call_id=row.tool_call_id,
        tool_name=row.tool_name, content_bytes=row.content_bytes or 0, chunk=getattr(row, "chunk", 0) or 0,
    )  # fmt: skip
