"""Row building of the projector: the stored event JSON round trip and the tokenizer's fast path."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from projections import lexical
from projections.rows import (
    MAX_INDEXED_CHARS,
    estimate_tokens,
    event_rows,
    has_later_chunks,
    recall_rows,
    restore_event_json,
)
from schemas import SessionEvent


def _event(content: str | None, role: str = "tool") -> SessionEvent:
    message: dict[str, object] = {"role": role, "content": content}
    if role == "tool":
        message |= {"tool_call_id": "c1", "name": "grep"}
    return SessionEvent.model_validate(
        {"app_name": "a", "user_id": "u", "session_id": "s", "event_id": "e1", "author": "agent",
         "timestamp": datetime(2025, 1, 1, tzinfo=UTC).isoformat(), "message": message}
    )  # fmt: skip


@given(st.one_of(st.none(), st.text(max_size=300)), st.sampled_from(["user", "assistant", "tool"]))
def test_stored_event_json_round_trips_exactly(content: str | None, role: str) -> None:
    event = _event(content, role)
    rows = event_rows(event, 7, estimate_tokens)
    event_json, text = rows.event[-1], rows.event[11]
    assert isinstance(event_json, str) and isinstance(text, str)
    assert restore_event_json(event_json, text) == event


def test_stored_event_json_does_not_repeat_the_text() -> None:
    big = "x" * 50_000
    rows = event_rows(_event(big), 0, estimate_tokens)
    event_json = rows.event[-1]
    assert isinstance(event_json, str) and big not in event_json and len(event_json) < 1000
    recall = recall_rows(_event(big), 0)
    assert recall is not None and recall.doc[8] == big[:MAX_INDEXED_CHARS]
    assert recall.doc[11] == 50_000  # content_bytes still describes the whole result


def _reference_tokens(text: str) -> set[str]:
    tokens: set[str] = set()
    for word in lexical._split_words(text):
        if not lexical.keywords(word):  # stop words and short words are never looked up, so never indexed
            continue
        tokens.add(lexical.stem(word))
        if len(tokens) >= lexical.MAX_DOC_TOKENS:
            break
    return tokens


@given(st.text(alphabet=st.sampled_from(list("abcXYZ019 _-,.éß中文摘要\n\tİ")), max_size=400))
def test_doc_tokens_fast_paths_match_the_reference(text: str) -> None:
    assert lexical.doc_tokens(text) == _reference_tokens(text)


def test_doc_tokens_cap_matches_the_reference() -> None:
    text = " ".join(f"w{i} w{i % 7}" for i in range(3000))
    assert lexical.doc_tokens(text) == _reference_tokens(text)
    assert len(lexical.doc_tokens(text)) == lexical.MAX_DOC_TOKENS


@given(st.text(alphabet=st.sampled_from(list("abcdefst019 _-,.éß中文摘要\n")), max_size=300))
def test_every_keyword_of_a_text_is_indexed(text: str) -> None:
    tokens = lexical.doc_tokens(text)
    assert {lexical.stem(k) for k in lexical.keywords(text)} <= tokens


def test_stop_words_and_short_words_are_not_indexed() -> None:
    assert lexical.doc_tokens("What is the plan for v2 of the 中 cache, and is it ok?") == {"plan", "v2", "中", "cache"}


_RECORD_CONTENT = st.one_of(
    st.none(),
    st.text(max_size=200),
    st.lists(st.one_of(st.builds(lambda t: {"type": "text", "text": t}, st.text(max_size=40)),
                       st.just({"type": "image_url", "image_url": {"url": "http://x"}})), max_size=3),
)  # fmt: skip


@given(_RECORD_CONTENT, st.sampled_from(["user", "assistant", "tool"]), st.booleans(), st.booleans())
def test_the_stored_json_made_from_the_record_reads_back_as_the_event(
    content: object, role: str, null_calls: bool, extra: bool
) -> None:
    """The projector stores the JSON of the decoded record, not of the model: it must restore the same event."""
    from schemas.records import parse_event_data

    message: dict[str, object] = {"role": role, "content": content}
    if null_calls:
        message["tool_calls"] = None
    if role == "tool":
        message |= {"tool_call_id": "c1", "name": "grep"}
    record: dict[str, object] = {"app_name": "a", "user_id": "u", "session_id": "s", "event_id": "e1",
                                 "author": "agent", "timestamp": "2025-01-01 10:00:00.5+02:00", "message": message,
                                 "usage": {"prompt_tokens": 2**70}}  # fmt: skip
    if extra:
        record["producer_field"] = {"nested": [1, "中文", 2.5, None]}
    event = parse_event_data(dict(record))
    rows = event_rows(event, 3, estimate_tokens, record)
    event_json, text = rows.event[-1], rows.event[11]
    assert isinstance(event_json, str) and isinstance(text, str)
    assert restore_event_json(event_json, text) == event
    assert record["message"] is message and message["content"] == content  # the record is not modified


def test_every_recall_row_carries_its_sessions_token() -> None:
    body = " ".join(f"line {i} status ok" for i in range(3000)) + " 猞猁出没"  # several chunks, CJK at the end
    rows = recall_rows(_event(body), 0)
    assert rows is not None and rows.chunks
    own = lexical.session_token("s")
    sets = [rows.doc[12], *(chunk[13] for chunk in rows.chunks)]
    assert all(isinstance(tokens, set) and own in tokens for tokens in sets)
    first = lexical.doc_tokens(body[:MAX_INDEXED_CHARS])
    assert rows.doc[12] == first | {own} and rows.tokens == sum(len(t) for t in sets if isinstance(t, set))
    # A message of stop words only holds no word token: its row still names its session.
    quiet = recall_rows(_event("it is what it is", role="user"), 0)
    assert quiet is not None and quiet.doc[12] == {own}


@given(st.text(max_size=300) | st.text(alphabet=st.sampled_from(list("session:s1 中文-_")), max_size=60))
def test_no_text_and_no_query_yields_a_session_token(text: str) -> None:
    # The session scopes match on the token: a message (or a query) able to spell it could pass for the session.
    assert not any(t.startswith(lexical.SESSION_TOKEN_PREFIX) for t in lexical.doc_tokens(text))
    assert not any(":" in t for lq in lexical.plan(text) for t in lq.index_terms)
    assert lexical.session_token("s1") not in lexical.doc_tokens(f"{lexical.session_token('s1')} {text}")


def test_the_context_line_of_a_document_is_its_first_chunk_on_one_line() -> None:
    rows = recall_rows(_event("first  line\n\nsecond 中文 " + "x" * 20_000), 0)
    assert rows is not None
    assert rows.line[:5] == rows.doc[:5] and rows.line[5] == "tool"
    line = rows.line[6]
    assert isinstance(line, str) and line.startswith("first line second 中文 xxx") and len(line) == lexical.LINE_CHARS


def test_tool_call_events_rows_are_one_per_call_id_and_one_per_result() -> None:
    """``tool_call_events``: what the context read pairs a result over (every call and result of its id)."""
    ts = datetime(2025, 1, 1, tzinfo=UTC)
    call = SessionEvent.model_validate(
        {"app_name": "a", "user_id": "u", "session_id": "s", "event_id": "e2", "author": "agent",
         "timestamp": ts.isoformat(), "filter_key": "a/b", "message": {"role": "assistant", "tool_calls": [
             {"id": "call_0", "type": "function", "function": {"name": "", "arguments": "{}"}},
             {"id": "call_0", "type": "function", "function": {"name": "grep", "arguments": "{}"}},
             {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}}
    )  # fmt: skip
    assert event_rows(call, 9, estimate_tokens).call_events == (
        ("a", "u", "s", "call_0", 9, "e2", ts, "assistant", "a/b", False, "grep"),
        ("a", "u", "s", "call_1", 9, "e2", ts, "assistant", "a/b", False, "ls"),
    )
    assert event_rows(_event("found"), 10, estimate_tokens).call_events == (
        ("a", "u", "s", "c1", 10, "e1", ts, "tool", "", False, "grep"),
    )
    assert event_rows(_event("hi", "user"), 11, estimate_tokens).call_events == ()


def test_an_error_event_without_text_is_indexed_by_its_error_as_a_request_shows_it() -> None:
    """A failed tool or model call has no text; a request shows its error (``SessionEvent.shown_text``), so the
    recall index holds that: the first chunk in the document row, the rest of a long one in later chunks."""
    for role in ("tool", "assistant"):
        error = {"type": "tool_error", "message": "数据库超时 " * 4000 + "pangolin 8812"}
        event = SessionEvent.model_validate({**_event(None, role).model_dump(mode="json"), "error": error})
        assert has_later_chunks(event)
        rows = recall_rows(event, 0)
        assert rows is not None and rows.text == event.shown_text and rows.text.startswith("type: tool_error, ")
        assert rows.doc[8] == rows.text[:MAX_INDEXED_CHARS] and rows.doc[11] == len(rows.text.encode())
        assert "pangolin 8812" in rows.chunks[-1][9]
    assert recall_rows(_event(None), 0) is None  # no text and no error: nothing to find
