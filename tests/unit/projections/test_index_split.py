"""Which recall rows the primary indexing stage writes and which the deep stage writes (``rows.split_chunks``)."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from projections.rows import DEFAULT_PRIMARY_CHUNKS, MAX_INDEXED_CHARS, has_later_chunks, recall_rows, split_chunks
from schemas import SessionEvent


def _event(content: str, role: str = "tool", **extra: object) -> SessionEvent:
    message = {"role": role, "content": content, **({"tool_call_id": "c1"} if role == "tool" else {})}
    return SessionEvent.model_validate({
        "type": "event", "app_name": "a", "user_id": "u", "session_id": "s", "event_id": "e1",
        "timestamp": datetime(2025, 1, 1, tzinfo=UTC).isoformat(), "author": "agent", "message": message, **extra,
    })  # fmt: skip


_LONG = " ".join(f"line {i} status ok code{i % 97}" for i in range(6000))  # ~150 KB: several later chunks


def test_by_default_the_primary_stage_writes_no_later_chunk_and_the_deep_stage_all_of_them() -> None:
    rows = recall_rows(_event(_LONG), 7)
    assert rows is not None and len(rows.chunks) >= 3
    primary, deep = split_chunks(rows, DEFAULT_PRIMARY_CHUNKS)
    assert DEFAULT_PRIMARY_CHUNKS == 0
    assert primary.doc == rows.doc and primary.line == rows.line and primary.chunks == ()
    assert primary.tokens == len(rows.doc[12])  # type: ignore[arg-type]
    assert deep is not None and deep.chunks == rows.chunks and deep.chunk_sizes == rows.chunk_sizes


@given(st.integers(min_value=-2, max_value=8))
@settings(max_examples=20, deadline=None)
def test_the_two_parts_are_the_whole_document_once(keep: int) -> None:
    rows = recall_rows(_event(_LONG), 7)
    assert rows is not None
    primary, deep = split_chunks(rows, keep)
    later = deep.chunks if deep is not None else ()
    assert primary.chunks + later == rows.chunks
    assert [c[5] for c in primary.chunks] == list(range(1, len(primary.chunks) + 1))  # chunks 1..K
    assert all(int(c[5]) > max(0, keep) for c in later)  # type: ignore[call-overload]
    assert primary.tokens + (deep.tokens - len(rows.doc[12]) if deep is not None else 0) == rows.tokens  # type: ignore[arg-type]
    assert (deep is None) == (len(rows.chunks) <= max(0, keep))
    assert recall_rows(_event(_LONG), 7, later_chunks=keep) == primary  # what the primary stage builds


def test_a_short_document_leaves_the_deep_stage_nothing() -> None:
    rows = recall_rows(_event("a short answer about the quokka"), 1)
    assert rows is not None and split_chunks(rows, 0)[1] is None
    assert not has_later_chunks(_event("a short answer about the quokka"))


@given(
    st.sampled_from(
        [
            "x" * (MAX_INDEXED_CHARS + 1),
            "word " * 3000,
            "".join(chr(0x4E00 + i % 2000) for i in range(3000)),
            "ok",
            "中文" * 50,
            " ".join(f"w{i}" for i in range(1500)),
        ]
    )
)
@settings(max_examples=12, deadline=None)
def test_the_deep_stage_tokenizes_exactly_the_documents_with_later_chunks(text: str) -> None:
    ev = _event(text)
    rows = recall_rows(ev, 1)
    assert has_later_chunks(ev) == bool(rows is not None and rows.chunks)


def test_nothing_unsearchable_goes_to_the_deep_stage() -> None:
    assert not has_later_chunks(_event(_LONG, partial=True))
    assert not has_later_chunks(_event(_LONG, role="system"))


def test_the_settings_default_is_the_split_rules() -> None:
    from schemas.settings import IndexSettings

    assert IndexSettings().primary_chunks == DEFAULT_PRIMARY_CHUNKS
