"""Pure rules of the read side: windows, UTF-8 slicing, boundaries, lexical planning/scoring, filter keys."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from projections import filter_keys, lexical
from projections.boundary import Cut
from projections.context_read import ancestors_nearest_first, visible
from projections.windows import normalize_content, normalize_window, slice_content
from streams.rules import filter_keys as streams_filter_keys

T = datetime(2025, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [(None, None, (1, 1)), (0, 0, (1, 1)), (-3, -1, (1, 1)), (0, 2, (0, 2)), (5, 5, (2, 2)), (1, 9, (1, 3)),
     (3, 3, (2, 2)), (4, 0, (4, 0)), (9, 0, (4, 0))],
)  # fmt: skip
def test_normalize_window(before: int | None, after: int | None, expected: tuple[int, int]) -> None:
    assert normalize_window(before, after) == expected


@given(st.integers(-(10**6), 10**6) | st.none(), st.integers(-(10**6), 10**6) | st.none())
def test_normalize_window_matches_the_loop_rule(before: int | None, after: int | None) -> None:
    b = 1 if before is None else max(0, before)
    a = 1 if after is None else max(0, after)
    if (b, a) == (0, 0):
        b, a = 1, 1
    # The Go rule, with the larger side shrunk one at a time (after first on ties), done in closed form.
    excess = max(0, b + a - 4)
    big_first = max(0, min(excess, abs(b - a)))
    if b > a:
        b -= big_first
    else:
        a -= big_first
    excess -= big_first
    a -= (excess + 1) // 2
    b -= excess // 2
    assert normalize_window(before, after) == (b, a)


def test_normalize_window_is_fast_for_huge_sides() -> None:
    # A model may send any integer; the span rule must not step down one by one from it.
    assert normalize_window(10**18, 10**15) == (2, 2)
    assert normalize_window(10**18, 0) == (4, 0)


def test_normalize_content() -> None:
    assert normalize_content(None, None) == (0, 16 * 1024)
    assert normalize_content(-5, 0) == (0, 16 * 1024)
    assert normalize_content(7, 10**9) == (7, 64 * 1024)


@given(st.text(max_size=300), st.integers(0, 1200), st.integers(1, 400))
def test_slice_content_is_valid_utf8_and_within_limit(text: str, offset: int, limit: int) -> None:
    part = slice_content(text, offset, limit)
    data = text.encode()
    assert data[part.content_offset : part.content_offset + part.returned_bytes] == part.text.encode()
    # At most the limit from the offset asked for, plus the bytes of the character it fell inside.
    assert part.returned_bytes <= max(limit, 4) + (offset - part.content_offset)
    assert part.truncated == (part.returned_bytes < len(data))


@given(st.text(alphabet="a中é😀\u0301한", max_size=300), st.integers(1, 70))
def test_pages_stepped_by_the_limit_asked_for_skip_no_byte(text: str, limit: int) -> None:
    """An agent reading offsets 0, limit, 2*limit, ... (as the tool's description invites) sees every byte."""
    data = text.encode()
    seen = bytearray(len(data))
    for offset in range(0, len(data), limit):
        part = slice_content(text, offset, limit)
        seen[part.content_offset : part.content_offset + part.returned_bytes] = b"\x01" * part.returned_bytes
    assert all(seen), [i for i, b in enumerate(seen) if not b][:5]


def test_slice_content_snaps_back_to_character_start() -> None:
    part = slice_content("aé€", 2, 3)  # offset 2 is inside "é"
    assert (part.content_offset, part.text) == (1, "é")


def test_cut_exact_and_timestamp_only() -> None:
    exact = Cut.of(T, (T, 5))
    assert not exact.is_after(T, 5) and exact.is_after(T, 6) and exact.is_hidden(T, 4)
    # The log decides for an exact boundary: logged after the boundary event (a late event, stamped an hour
    # before it) is after; logged before it (a producer's clock ahead) is covered, whatever the stamps.
    assert exact.is_after(T - timedelta(hours=1), 6) and not exact.is_hidden(T - timedelta(hours=1), 6)
    assert exact.is_hidden(T + timedelta(milliseconds=1), 0) and not exact.is_after(T + timedelta(milliseconds=1), 0)
    assert exact.scan_from == T
    legacy = Cut.of(T)
    assert legacy.is_after(T, 1) and legacy.is_hidden(T, 1) and not legacy.is_after(T - timedelta(seconds=1), 9)
    # Microseconds are truncated to Cassandra's millisecond precision on both sides.
    assert Cut.of(T + timedelta(microseconds=700)).is_after(T, 0)


def test_lexical_plan_broadens_compound_questions() -> None:
    plan = lexical.plan("What did we decide about the kubernetes deployment, and the invoice total?")
    kws = [p.keywords for p in plan]
    assert kws[0] == ("decide", "kubernetes", "deployment", "invoice", "total")
    assert ("invoice", "total") in kws and ("kubernetes", "deployment") in kws
    assert lexical.is_compound("kubernetes deployment, and the invoice total")
    assert not lexical.is_compound("kubernetes deployment")
    assert lexical.plan("   ") == []


def test_lexical_keywords_keep_short_tokens_with_digits() -> None:
    assert lexical.keywords("is it v2 or db ok on k8s") == ("v2", "k8s")


def test_lexical_score_follows_go_formula() -> None:
    q = lexical.LexicalQuery("billing database", ("billing", "database"))
    assert lexical.score(q, "the billing database moved") == pytest.approx(1 + 0.75 + 0.15)
    assert lexical.score(q, "database only") == pytest.approx(0.5)
    assert lexical.score(q, "nothing here") == 0.0


_SPACED = st.lists(st.sampled_from(["cache", "kafka", "退款", " ", "  ", "\n", "\t", "\u3000", "\x1c", "\xa0", "a.b",
                                     "Cache", "k"]), max_size=12).map("".join)  # fmt: skip


@given(_SPACED, _SPACED)
def test_the_whole_query_bonus_matches_the_whitespace_collapsed_text(text: str, query: str) -> None:
    # The bonus is looked up without building a whitespace-collapsed copy of each document: same answer.
    phrase = lexical.normalize_query(query)
    flat = " ".join(text.lower().split())
    assert lexical.ScoredText(text).holds_phrase(phrase) == (phrase in flat)


def test_the_whole_query_bonus_spans_line_breaks_and_cjk() -> None:
    q = lexical.LexicalQuery("kafka consumer offset", ("kafka", "consumer", "offset"))
    assert lexical.score(q, "the Kafka\n  consumer\toffset moved") == pytest.approx(1 + 0.75 + 0.15)
    assert lexical.ScoredText("退款编号\n 四五 已经批准").holds_phrase("退款编号 四五")


def test_doc_tokens_stem_and_cjk() -> None:
    assert {"deploy", "kubernet"} <= lexical.doc_tokens("Deployed kubernetes")
    assert lexical.doc_tokens("kubernetes") == lexical.doc_tokens("Kubernetes")
    assert "摘要" in lexical.doc_tokens("获取摘要")


_WORDS = st.sampled_from(["the", "Deploys", "deploy", "ab", "x9", "kubernetes", "café", "获取", "a-b"]) | st.text()


@given(st.lists(_WORDS, max_size=30).map(" ".join))
def test_doc_tokens_are_the_index_tokens_of_the_query_keywords(text: str) -> None:
    # Every keyword a query can hold, stemmed, is indexed; nothing else is.
    assert lexical.doc_tokens(text) == {lexical.stem(k) for k in lexical.keywords(text)}


@given(st.lists(_WORDS, max_size=30).map(" ".join), _WORDS)
def test_a_keyword_matches_verbatim_or_by_its_stem_without_tokenizing_needlessly(text: str, word: str) -> None:
    # The shortcut (a stem that is no substring is no token) gives the plain rule's answer.
    for keyword in lexical.keywords(word) or (word.lower(),):
        doc = lexical.ScoredText(text)
        plain = keyword in doc.lowered or lexical.stem(keyword) in lexical.doc_tokens(doc.lowered)
        assert doc.holds_keyword(keyword) == plain


def test_doc_tokens_cap_keeps_the_first_words() -> None:
    words = [f"w{i:05d}" for i in range(lexical.MAX_DOC_TOKENS + 50)]
    tokens = lexical.doc_tokens(" ".join(["the", *words]))
    assert tokens == set(words[: lexical.MAX_DOC_TOKENS])


_key = st.lists(st.sampled_from(["app", "b", "c", "x"]), max_size=3).map("/".join)


@given(_key, _key)
def test_filter_key_rule_matches_streams(event_key: str, target: str) -> None:
    assert filter_keys.in_summary_input(event_key, target) == streams_filter_keys.in_summary_input(event_key, target)


def test_doc_tokens_survive_the_memo_filling_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bounded word memo is reset between texts, never while a text's words are looked up."""
    monkeypatch.setattr(lexical, "_INDEX_TOKEN_MAX", 8)
    monkeypatch.setattr(lexical, "_INDEX_TOKEN", {})
    first = lexical.doc_tokens("alpha bravo charlie delta echo")
    second = lexical.doc_tokens("foxtrot golf hotel india juliet kilo lima")
    assert len(first) == 5 and len(second) == 7
    assert lexical.doc_tokens("theta alpha") == {lexical._index_token("theta"), lexical._index_token("alpha")}


@given(
    st.lists(
        st.sampled_from(["deploy", "invoice", "kafka", "订单", "号码", "退款", "ACME-42", "\n", " ", "。"])
        | st.text(alphabet="abcdefghij 中文字符", min_size=1, max_size=12),
        max_size=400,
    ),
    st.integers(40, 400),
    st.integers(5, 60),
)
def test_chunks_cover_the_whole_text_within_both_caps(parts: list[str], max_chars: int, max_tokens: int) -> None:
    text = " ".join(parts)
    chunks = lexical.chunk_index(text, max_chars=max_chars, max_tokens=max_tokens, overlap=20)
    if not text:
        assert chunks == []
        return
    assert chunks[0][0] == 0 and chunks[-1][1] == len(text)
    for (s1, e1, _), (s2, _, _) in itertools.pairwise(chunks):
        assert s1 < s2 <= e1  # contiguous or overlapping, always moving on
    for start, end, tokens in chunks:
        assert end - start <= max_chars
        assert tokens == lexical.doc_tokens(text[start:end]) and len(tokens) <= max_tokens
    indexed = set().union(*(t for _, _, t in chunks))
    assert lexical.doc_tokens(text) <= indexed or len(lexical.doc_tokens(text)) >= lexical.MAX_DOC_TOKENS


@given(
    st.lists(
        st.sampled_from(["deploy", "invoice", "kafka", "订单", "号码", "退款", "ACME-42", "\n", " ", "。"])
        | st.text(alphabet="abcdefghij 中文字符", min_size=1, max_size=12),
        max_size=400,
    ),
    st.integers(40, 200),
    st.integers(5, 30),
)
def test_the_first_chunk_has_its_own_caps_and_the_rest_cover_the_text(
    parts: list[str], first_chars: int, first_tokens: int
) -> None:
    """The recall rows: a small first chunk (``recall_docs``), larger later ones (``recall_chunks``)."""
    text = " ".join(parts)
    max_chars, max_tokens = first_chars * 4, first_tokens * 4
    chunks = lexical.chunk_index(text, max_chars, max_tokens, 20, first_chars=first_chars, first_tokens=first_tokens)
    if not text:
        assert chunks == []
        return
    assert chunks[0][0] == 0 and chunks[-1][1] == len(text)
    assert chunks[0][1] <= first_chars and len(chunks[0][2]) <= first_tokens
    for (s1, e1, _), (s2, _, _) in itertools.pairwise(chunks):
        assert s1 < s2 <= e1
    for start, end, tokens in chunks[1:]:
        assert end - start <= max_chars
        assert tokens == lexical.doc_tokens(text[start:end], cap=max_tokens) and len(tokens) <= max_tokens
    indexed = set().union(*(t for _, _, t in chunks))
    assert lexical.doc_tokens(text, cap=10**6) <= indexed


def test_a_detail_deep_in_a_long_document_is_indexed() -> None:
    from projections.rows import recall_rows
    from schemas import SessionEvent

    filler = " ".join(f"line {i} status ok" for i in range(3000))  # ~50 KB of Latin text
    cjk_filler = "".join(chr(0x4E00 + (i * 7) % 3000) for i in range(6000))  # 6,000 CJK characters
    for body, needle in ((filler + " refund code ZX-9041 approved " + filler, "9041"),
                         (cjk_filler + "退款编号九零四一已批准" + cjk_filler, "退款")):  # fmt: skip
        event = SessionEvent(
            app_name="a", user_id="u", session_id="s", event_id="e1", timestamp=T, author="tool",
            message={"role": "tool", "tool_call_id": "c1", "content": body},
        )  # fmt: skip
        rows = recall_rows(event, 1)
        assert rows is not None and rows.chunks
        first_tokens = rows.doc[12]
        assert isinstance(first_tokens, set) and needle not in first_tokens
        assert any(needle in (chunk[13] or set()) for chunk in rows.chunks)
        covered = "".join(str(c[9]) for c in rows.chunks)
        assert covered.endswith(body[-100:])


def test_chunking_a_huge_single_word_is_linear() -> None:
    import time

    started = time.perf_counter()
    chunks = lexical.chunk_index("x" * 200_000)
    assert time.perf_counter() - started < 2.0
    assert chunks[-1][1] == 200_000 and len(chunks) < 40


def test_the_projector_skips_the_answers_on_the_summaries_topic_and_refuses_unknown_records() -> None:
    """Failures and replies (``summary_reply`` names a summary already published) are no new version."""
    from projections.projector import parse_summary_record
    from schemas import RecordDecodeError

    assert parse_summary_record(b'{"type": "summary_failure"}') is None
    assert parse_summary_record(b'{"type": "summary_reply", "summary": {}}') is None
    with pytest.raises(RecordDecodeError, match="unknown record type"):
        parse_summary_record(b'{"type": "summary_echo"}')


@given(_key, _key, st.data())
def test_what_a_prompt_cuts_is_in_the_cutting_summarys_input(
    event_key: str, prompt_key: str, data: st.DataObject
) -> None:
    """The promise at the read side: a prompt on ``prompt_key`` shows the events ``visible`` to it
    and cuts them at the boundary of the summary that applies (its own or an ancestor's, the full
    session last); every event the cut can hide must be in that summary's input, whichever of the
    applicable summaries exists. (Before: a root agent's event keyed ``app`` was hidden from the
    prompt of ``app/b`` by ``app/b``'s boundary without being in ``app/b``'s input.)"""
    applied = data.draw(st.sampled_from(ancestors_nearest_first(prompt_key)))
    if visible(event_key, prompt_key):
        assert filter_keys.in_summary_input(event_key, applied), (event_key, prompt_key, applied)
        assert streams_filter_keys.in_summary_input(event_key, applied), (event_key, prompt_key, applied)
