"""Which summary stands for a filter key: for a prompt exact → ancestor → full session; for display also any."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from projections.summary_selection import (
    SummaryCut,
    prefix_aggregate,
    select_for_display,
    select_for_prompt,
    select_hidden,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def cut(key: str, text: str, at: float, last: str | None = None, created: float | None = None) -> SummaryCut:
    made = T0 + timedelta(seconds=created) if created is not None else None
    return SummaryCut(key, text, T0 + timedelta(seconds=at), last, made)


def test_exact_key_wins_over_its_subtree_and_the_full_session() -> None:
    cuts = [cut("a/b", "own", 9, "e9"), cut("a/b/x", "x", 3), cut("", "full", 10)]
    found = select_hidden(cuts, "a/b")
    assert found is not None
    assert (found.summary, found.source, found.last_event_id, found.keys) == ("own", "exact", "e9", ("a/b",))


def test_subtree_aggregates_sorted_by_key_with_the_earliest_cutoff_and_no_event_id() -> None:
    cuts = [cut("a/b/y", "why", 6, "e6"), cut("a/b/x", "ex", 4, "e4"), cut("a/c", "other", 1), cut("", "full", 10)]
    found = select_for_display(cuts, "a/b")
    assert found is not None
    assert found.summary == "ex\n\nwhy"
    assert found.keys == ("a/b/x", "a/b/y")
    assert (found.cutoff_at, found.last_event_id, found.source) == (T0 + timedelta(seconds=4), None, "prefix")


def test_a_single_descendant_keeps_its_exact_boundary() -> None:
    found = prefix_aggregate([cut("a/b/x", "ex", 4, "e4")], "a/b")
    assert found is not None and (found.last_event_id, found.keys) == ("e4", ("a/b/x",))


def test_prefixes_match_whole_segments_only() -> None:
    cuts = [cut("a/bz", "not a child", 2), cut("", "full", 5)]
    found = select_hidden(cuts, "a/b")
    assert found is not None and (found.summary, found.source) == ("full", "full_session")
    assert prefix_aggregate(cuts, "a/b") is None


def test_blank_texts_are_no_summary() -> None:
    assert select_hidden([cut("a/b", "  ", 3), cut("a/b/x", "\n", 3)], "a/b") is None
    found = select_for_display([cut("a/b", " ", 3), cut("a/b/x", "ex", 2)], "a/b")
    assert found is not None and found.source == "prefix"
    assert select_for_prompt([cut("a/b", " ", 3), cut("a/b/x", "ex", 2)], "a/b") is None


def test_prompt_and_hidden_never_take_another_branch_display_takes_any() -> None:
    cuts = [cut("a/c", "c", 5, created=1), cut("a/d", "d", 5, created=2), cut("a/e", "e", 4, created=9)]
    assert select_hidden(cuts, "a/b") is None
    assert select_hidden(cuts, "") is None
    assert select_for_prompt(cuts, "a/b") is None and select_for_prompt(cuts, "") is None
    found = select_for_display(cuts, "a/b")
    # latest cutoff first, then the newest write
    assert found is not None and (found.summary, found.source) == ("d", "any")
    assert select_for_display([], "a/b") is None


def test_prompt_takes_the_nearest_ancestor_then_the_full_session() -> None:
    cuts = [cut("a", "root branch", 2, "e2"), cut("a/b", "mid", 3, "e3"), cut("", "full", 9, "e9")]
    found = select_for_prompt(cuts, "a/b/c")
    assert found is not None and (found.summary, found.source, found.keys) == ("mid", "ancestor", ("a/b",))
    found = select_for_prompt(cuts[:1] + cuts[2:], "a/b/c")
    assert found is not None and (found.summary, found.source) == ("root branch", "ancestor")
    found = select_for_prompt([cut("", "full", 9, "e9"), cut("a/bz", "x", 10)], "a/b")
    assert found is not None and (found.summary, found.source) == ("full", "full_session")
    # Descendants never stand for the key in a prompt: they did not see its own events.
    assert select_for_prompt([cut("a/b/x", "child", 4, "e4")], "a/b") is None
    assert select_hidden(cuts, "a/b/c") == select_for_prompt(cuts, "a/b/c")


def test_full_session_key_never_aggregates_branches() -> None:
    cuts = [cut("a", "a", 1), cut("b", "b", 2)]
    assert select_hidden(cuts, "") is None
    found = select_for_display(cuts, "")
    assert found is not None and found.source == "any" and found.summary == "b"


def test_ancestors_agree_with_the_streams_rule() -> None:
    from projections.filter_keys import ancestors_of
    from streams.rules.filter_keys import ancestors

    for key in ("", "a", "a/b", "a/b/c", "旅行/计划/第一天"):
        assert ancestors_of(key) == list(reversed(ancestors(key)[:-1]))
