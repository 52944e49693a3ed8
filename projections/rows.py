"""Turning records into table rows (pure: no driver code).

Each row is a plain tuple in the column order of the matching statement in
``projections.statements``; the same record always yields the same row, which
is what makes re-delivery harmless.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import orjson

from projections.lexical import (
    LATER_CHUNK_CHARS,
    LATER_CHUNK_TOKENS,
    MAX_DOC_TOKENS,
    chunk_index,
    context_line,
    doc_tokens,
    fold,
    session_token,
)
from schemas import Message, SessionEvent, SessionSummary

TokenCounter = Callable[[Message], int]
"""Counts the tokens of one message; injected by the composition root."""

RECALL_ROLES = frozenset({"user", "assistant", "tool"})
MAX_INDEXED_CHARS = 8 * 1024
"""``recall_docs`` holds the first 8 Ki characters of a document and their tokens (scoring and snippets read
that prefix; ``session_load`` reads the full event row). A longer document, or one whose prefix holds more
than ``MAX_DOC_TOKENS`` tokens (CJK text), is indexed whole: its further chunks are ``recall_chunks`` rows."""


def estimate_tokens(message: Message) -> int:
    """Fallback counter (4 characters per token) for callers that inject none."""
    text = (message.content or "") + (message.reasoning_content or "")
    text += "".join(tc.function.name + tc.function.arguments for tc in message.tool_calls)
    return (len(text) + 3) // 4


def message_text(message: Message) -> str:
    """The text a reader sees: the content (list-of-parts content is already flattened)."""
    return message.content or ""


def stored_event_json(event: SessionEvent) -> str:
    """``event`` as JSON without a non-empty ``message.content``: that text is already the row's ``text`` column.

    Storing it twice doubled the bytes written per event (50 KB tool results).
    ``restore_event_json`` puts it back; the round trip is exact because the
    content is only left out when it is a non-empty string (``None`` and ``""``
    are kept as they are).
    """
    if not event.message.content:
        return event.model_dump_json()
    message = event.message.model_copy(update={"content": None})
    return event.model_copy(update={"message": message}).model_dump_json()


def stored_record_json(record: dict[str, Any], event: SessionEvent) -> str:
    """What ``stored_event_json(event)`` stores, made from the record ``event`` was validated from.

    The projector has the decoded record at hand: dumping it (with the
    message content left out the same way) costs a fraction of copying and
    dumping the model, and reads back as the same event, because
    ``restore_event_json`` validates it exactly as the record was validated
    (a list-of-parts content is left out like a string: the ``text`` column
    holds its flattened text). ``record`` is not modified.
    """
    message = record.get("message")
    if event.message.content and isinstance(message, dict):
        record = {**record, "message": {**message, "content": None}}
    try:
        return orjson.dumps(record).decode()
    except orjson.JSONEncodeError:  # integers beyond 64 bits: the json module writes them exactly
        return json.dumps(record, ensure_ascii=False)


def restore_event_json(event_json: str, text: str) -> SessionEvent:
    """The event stored by ``stored_event_json`` (its content taken from the ``text`` column)."""
    event = SessionEvent.model_validate_json(event_json)
    if text and event.message.content is None:
        message = event.message.model_copy(update={"content": text})
        event = event.model_copy(update={"message": message})
    return event


POSTING_BYTES = 24
"""What one token of a row's ``tokens`` set weighs in a mutation (the cell and its path), for batch sizing."""


def row_bytes(text: str, tokens: set[str] | None = None) -> int:
    """About the bytes a row with ``text`` (and ``tokens``) adds to a batch: UTF-8, not characters.

    A CJK chunk is three bytes a character and a token per character: sized
    by characters, a batch of them held several times the bytes and the SAI
    postings it was meant to, and timed out under load.
    """
    size = len(text) if text.isascii() else 3 * len(text)
    return size + POSTING_BYTES * (len(tokens) if tokens else 0) + 256


def recall_text(event: SessionEvent) -> str:
    """What the recall index holds of ``event``: the text a request shows of it (``SessionEvent.shown_text``),
    so an error event without text (a failed tool or model call) is found by its error, as the request shows
    it (``type: <t>, message: <m>``)."""
    return event.shown_text


def recall_eligible(event: SessionEvent) -> bool:
    """Searchable: complete, no tool calls, a user/assistant/tool role and non-empty text (Go rule), the text
    being :func:`recall_text` (an error event's error too)."""
    msg = event.message
    return not event.partial and not msg.tool_calls and msg.role in RECALL_ROLES and bool(recall_text(event).strip())


@dataclass(frozen=True)
class EventRows:
    """Every row of the critical path (what the next prompt needs) one event produces."""

    event: tuple[object, ...]
    event_id: tuple[object, ...]
    tool_calls: tuple[tuple[object, ...], ...]
    tool_result: tuple[object, ...] | None
    turn: tuple[object, ...] | None = None
    """The ``session_turns`` row (events of an invocation or request)."""
    call_events: tuple[tuple[object, ...], ...] = ()
    """The ``tool_call_events`` rows: one per distinct call id of an assistant event's calls, one for a tool
    result (the calls and results ``streams.context.pairing.pair_results`` pairs)."""
    size: int = 0
    """Approximate bytes of the event row (for batch sizing)."""


def event_rows(
    event: SessionEvent,
    seq: int,
    count_tokens: TokenCounter,
    record: dict[str, Any] | None = None,
    digest: str | None = None,
) -> EventRows:
    """The rows of ``event``, the ``seq`` (Kafka offset) orders same-timestamp events of its session.

    ``digest``: the record's ``schemas.event_ids.record_digest``, kept with its event id (``None``: not known).

    ``record``: the decoded record ``event`` was validated from, when at hand (see ``stored_record_json``).
    """
    msg = event.message
    app, user, sid = event.app_name, event.user_id, event.session_id
    text = message_text(msg)
    size = len(text.encode("utf-8"))
    call_ids = [tc.id for tc in msg.tool_calls]
    event_json = stored_event_json(event) if record is None else stored_record_json(record, event)
    event_row: tuple[object, ...] = (
        app, user, sid, event.timestamp, event.event_id, seq, event.filter_key, event.author, msg.role,
        event.request_id, event.invocation_id, text, msg.tool_call_id, msg.name, call_ids or None,
        bool(call_ids), event.partial, event.skip_summarization, count_tokens(msg), size, event_json,
    )  # fmt: skip
    calls = tuple((app, user, sid, tc.id, tc.function.name, event.event_id, event.timestamp) for tc in msg.tool_calls)
    result = None
    if msg.role == "tool" and msg.tool_call_id and not event.partial:
        result = (app, user, sid, msg.tool_call_id, event.event_id, event.timestamp)
    named: dict[str, str] = {}  # a call id once, named when any of its calls is (a prompt keeps named calls)
    if msg.role == "assistant":
        for tc in msg.tool_calls:
            named[tc.id] = named.get(tc.id) or tc.function.name
    elif msg.role == "tool" and msg.tool_call_id:
        named[msg.tool_call_id] = msg.name or ""
    call_events = tuple(
        (app, user, sid, call_id, seq, event.event_id, event.timestamp, msg.role, event.filter_key, event.partial,
         name)
        for call_id, name in named.items()
    )  # fmt: skip
    turn = None
    if event.invocation_id or event.request_id:
        turn = (
            app, user, sid, event.invocation_id, event.request_id, event.timestamp, event.event_id, seq,
            event.filter_key, msg.role, event.partial,
        )  # fmt: skip
    return EventRows(
        size=row_bytes(text) + len(event_json),
        event=event_row,
        event_id=(app, user, sid, event.event_id, event.timestamp, seq, digest),
        tool_calls=calls,
        tool_result=result,
        turn=turn,
        call_events=call_events,
    )


def late_row(event: SessionEvent, seq: int) -> tuple[object, ...]:
    """The ``late_events`` row of ``event`` at log position ``seq`` (``projections.late_events``)."""
    return (
        event.app_name, event.user_id, event.session_id, seq, event.timestamp, event.event_id, event.filter_key,
        event.message.role, event.partial,
    )  # fmt: skip


@dataclass(frozen=True)
class RecallRows:
    """The recall index rows of one event (written by the indexer, ``projections.indexer``)."""

    doc: tuple[object, ...]
    """The ``recall_docs`` row: the first chunk (at most ``MAX_INDEXED_CHARS``) and its tokens."""
    chunks: tuple[tuple[object, ...], ...]
    """``recall_chunks`` rows: the chunks after the first of a long document (see ``lexical.chunk_index``)."""
    text: str
    """The whole text (what an embedder embeds)."""
    size: int
    """Approximate bytes of the ``recall_docs`` row (for batch sizing, see ``row_bytes``)."""
    chunk_sizes: tuple[int, ...] = ()
    """Approximate bytes of each ``recall_chunks`` row."""
    line: tuple[object, ...] = ()
    """The ``recall_lines`` row: the document as one line of a hit's context window."""

    @property
    def tokens(self) -> int:
        """Index postings the rows add (each token of each row: the indexer's dominant cost in Cassandra)."""
        first = self.doc[12]
        return (len(first) if isinstance(first, set) else 0) + sum(
            len(c[13]) for c in self.chunks if isinstance(c[13], set)
        )


def recall_rows(event: SessionEvent, seq: int, later_chunks: int | None = None) -> RecallRows | None:
    """The recall rows of ``event``, or ``None`` when it is not searchable (see ``recall_eligible``).

    Indexed whole: the first chunk in ``recall_docs``; a longer document, or
    one whose prefix holds more than ``MAX_DOC_TOKENS`` tokens (CJK text),
    continues in ``recall_chunks`` rows of up to ``lexical.LATER_CHUNK_CHARS``.
    ``later_chunks``: at most that many of those (the primary index stage's part,
    ``split_chunks(recall_rows(event, seq), k)[0]``; 0 does not cut the rest at all).
    """
    if not recall_eligible(event):
        return None
    msg = event.message
    app, user, sid = event.app_name, event.user_id, event.session_id
    text = recall_text(event)
    size = len(text.encode("utf-8"))
    indexed = text[:MAX_INDEXED_CHARS]
    tokens = doc_tokens(indexed)
    own = session_token(sid)
    doc = (
        app, user, sid, event.timestamp, event.event_id, seq, event.filter_key, msg.role, indexed,
        msg.tool_call_id, msg.name, size, tokens | {own},
    )  # fmt: skip
    chunks: tuple[tuple[object, ...], ...] = ()
    chunk_sizes: tuple[int, ...] = ()
    if later_chunks != 0 and (len(text) > MAX_INDEXED_CHARS or len(tokens) >= MAX_DOC_TOKENS):
        spans = chunk_index(text, LATER_CHUNK_CHARS, LATER_CHUNK_TOKENS, first_chars=MAX_INDEXED_CHARS,
                            first_tokens=MAX_DOC_TOKENS)  # fmt: skip
        later = spans[1:] if later_chunks is None else spans[1 : 1 + max(0, later_chunks)]
        chunks = tuple(
            (app, user, sid, event.timestamp, event.event_id, n, seq, event.filter_key, msg.role, text[a:b],
             msg.tool_call_id, msg.name, size, chunk_tokens | {own})
            for n, (a, b, chunk_tokens) in enumerate(later, start=1)
        )  # fmt: skip
        chunk_sizes = tuple(row_bytes(text[a:b], chunk_tokens) for a, b, chunk_tokens in later)
    line = (app, user, sid, event.timestamp, event.event_id, msg.role, context_line(indexed))
    return RecallRows(doc=doc, chunks=chunks, text=text, size=row_bytes(indexed, tokens), chunk_sizes=chunk_sizes,
                      line=line)  # fmt: skip


DEFAULT_PRIMARY_CHUNKS = 0
"""How many ``recall_chunks`` rows of a long document the primary indexing stage writes (``split_chunks``).

0: the primary stage writes every first chunk, message and context line, the deep stage every later chunk.
Measured at a sustained 1,000 events/s of the benchmark's mix (``benchmarks/index_lag.py``): the later
chunks are 57% of the mix's SAI postings, so with any of them on the primary path its lag grows on a 2-core
box; a document's first 8 Ki characters are what a search answers from in the common case anyway."""


def split_chunks(rows: RecallRows, primary_chunks: int) -> tuple[RecallRows, RecallRows | None]:
    """``rows`` cut between the two indexing stages: the primary's part and the deep stage's (``None``: nothing).

    The primary stage writes the document row, the context line and the first
    ``primary_chunks`` of ``recall_chunks`` (chunks 1..K); the deep stage writes the
    chunks after those (K+1..), with the document row and line left to the primary.
    The two parts together are ``rows``; a document without later chunks beyond K
    leaves the deep stage nothing.
    """
    keep = max(0, primary_chunks)
    primary = replace(rows, chunks=rows.chunks[:keep], chunk_sizes=rows.chunk_sizes[:keep])
    if len(rows.chunks) <= keep:
        return primary, None
    return primary, replace(rows, chunks=rows.chunks[keep:], chunk_sizes=rows.chunk_sizes[keep:])


def has_later_chunks(event: SessionEvent) -> bool:
    """Whether ``recall_rows(event)`` has ``recall_chunks`` rows (the condition it cuts by), without building them:
    the deep stage tokenizes only such documents."""
    if not recall_eligible(event):
        return False
    text = recall_text(event)
    if len(text) > MAX_INDEXED_CHARS:
        return True
    # Every token starts at its own character of the folded text: a shorter text cannot reach the cap
    # (most messages; tokenizing them all again was a tenth of the deep stage's CPU).
    return len(fold(text)) >= MAX_DOC_TOKENS and len(doc_tokens(text)) >= MAX_DOC_TOKENS


def summary_history_row(summary: SessionSummary) -> tuple[object, ...]:
    """The history row: the summary and the window it covers (``summaries_history`` for epoch 0;
    ``summaries_epoch_history`` takes it with the epoch appended, see :func:`summary_history_target`)."""
    prev = summary.previous_boundary
    row: tuple[object, ...] = (
        summary.app_name, summary.user_id, summary.session_id, summary.filter_key, summary.version,
        summary.summary, summary.boundary.cutoff_at, summary.boundary.last_event_id,
        prev.cutoff_at if prev else None, prev.last_event_id if prev else None, summary.created_at,
        summary.model_dump_json(),
    )  # fmt: skip
    return row if summary.epoch == 0 else (*row, summary.epoch)


def summary_history_target(summary: SessionSummary) -> str:
    """Which statement writes :func:`summary_history_row`: epoch 0 keeps the table it always had."""
    return "history" if summary.epoch == 0 else "epoch_history"


def summary_latest_values(summary: SessionSummary) -> tuple[object, ...]:
    """The non-key values of ``summaries_latest`` for ``summary``."""
    return (
        summary.version, summary.summary, summary.boundary.cutoff_at, summary.boundary.last_event_id,
        summary.created_at, summary.model_dump_json(), summary.epoch,
    )  # fmt: skip
