"""Recall finds a word, an id or a number written inside CJK text, as typed (no spaces, full-width forms)."""

from __future__ import annotations

import pytest

from projections.lexical import MAX_DOC_TOKENS, MIN_SCORE, chunk_index, doc_tokens, plan, score

FACTS = [
    ("我的订单号是ORDER12345，请记住", "ORDER12345"),
    ("我主要用Python写后端服务", "python"),
    ("航班号CA1234明天早上八点起飞", "ca1234 航班"),
    ("订单号是１２３４５，明天到", "12345"),  # full-width digits, as an IME types them
    ("ＡＰＩキーはＳＫ９９だよ", "sk99"),  # full-width letters among kana
    ("用户说：我住在上海浦东", "上海浦东"),  # CJK alone: as before
    ("the build uses Python 3.12", "python"),  # no CJK: as before
]


def found(doc: str, query: str) -> bool:
    """What a search needs: some query of the plan whose index terms the document's tokens all hold,
    and a score above the floor."""
    tokens = doc_tokens(doc)
    return any(set(q.index_terms) <= tokens and score(q, doc) >= MIN_SCORE for q in plan(query))


@pytest.mark.parametrize(("doc", "query"), FACTS)
def test_a_fact_written_in_cjk_text_is_found_by_its_term(doc: str, query: str) -> None:
    assert found(doc, query), (sorted(doc_tokens(doc)), [q.index_terms for q in plan(query)])


def test_a_word_glued_to_cjk_text_is_one_token_and_its_cjk_neighbours_bigrams() -> None:
    assert doc_tokens("我用Python写") == {"我用", "python", "写"}


def test_a_fact_deep_in_a_large_cjk_tool_result_is_in_some_chunk() -> None:
    filler = "系统日志记录了很多内容" * 400
    text = f"{filler}设备编号DEV7788已经离线{filler}"
    chunks = chunk_index(text)
    assert len(chunks) > 1
    assert any("dev7788" in tokens for _, _, tokens in chunks)


def test_half_width_katakana_is_chunked_as_the_cjk_it_folds_to() -> None:
    """The chunker reads the text unfolded; NFKC makes half-width katakana CJK (bigrams): no chunk
    may reach the token cap, or bigrams past it go unindexed."""
    seed, chars = 7, []
    for _ in range(3000):  # many distinct pairs: the token cap matters
        seed = (seed * 1103515245 + 12345) % 2**31
        chars.append(chr(0xFF71 + seed % 45))
    kana = "".join(chars)
    text = f"{kana}番号ID4455{kana}"
    chunks = chunk_index(text)
    assert len(chunks) > 2
    assert all(len(tokens) <= MAX_DOC_TOKENS for _, _, tokens in chunks)
    indexed = set().union(*(tokens for _, _, tokens in chunks))
    assert doc_tokens(text, cap=10**9) <= indexed  # every pair indexed in some chunk
    assert "id4455" in indexed


def test_a_text_whose_lower_case_is_longer_is_chunked_at_its_own_positions() -> None:
    """Turkish capital İ lowers to two characters: chunk positions found on the lowered copy drifted from
    the text the rows are cut from, and the end of a long document was never indexed."""
    filler = " ".join(f"İstanbul{i}" for i in range(4000))
    markers = [f"zmarker{i:04d}q" for i in range(20)]
    text = f"{filler} {' '.join(markers)}"
    chunks = chunk_index(text)
    assert chunks[-1][1] == len(text)
    for marker in markers:
        assert any(marker in tokens and marker in text[a:b].lower() for a, b, tokens in chunks), marker


def test_a_cjk_run_cut_at_the_token_cap_never_leaves_its_first_character_alone() -> None:
    """Found by the chunk property: a cut after a run's first character left a one-character run,
    indexed as a token of its own, one past the cap."""
    text = "deploy invoice 中字aaa字a中字中"
    chunks = chunk_index(text, max_chars=40, max_tokens=5)
    for start, end, tokens in chunks:
        assert tokens == doc_tokens(text[start:end]) and len(tokens) <= 5, (text[start:end], tokens)
    assert doc_tokens(text, cap=10**9) <= set().union(*(t for _, _, t in chunks))
