import pytest

from streams.rules.filter_keys import ancestors, counts_toward, in_subtree, in_summary_input, is_within, related
from streams.rules.targets import allows_filter_key, normalize_allowlist, summary_targets


@pytest.mark.parametrize(
    ("key", "scope", "expected"),
    [
        ("app/tool", "app/tool", True),
        ("app/tool/search", "app/tool", True),
        ("app/toolbox", "app/tool", False),
        ("app", "app/tool", False),
        ("other/tool", "app/tool", False),
    ],
)
def test_is_within_matches_whole_segments(key: str, scope: str, expected: bool) -> None:
    assert is_within(key, scope) is expected


def test_related_is_bidirectional_and_empty_matches_all() -> None:
    assert related("app/tool", "app/tool/search")
    assert related("app/tool/search", "app/tool")
    assert not related("app/tool", "app/toolbox")
    assert related("", "x/y") and related("x", "")


def test_branch_counts_subtree_and_keyless_but_not_ancestors() -> None:
    assert counts_toward("app/a/b", "app/a", "app")
    assert counts_toward("", "app/a", "app")
    assert not counts_toward("app", "app/a", "app")
    assert not counts_toward("app/ab", "app/a", "app")


def test_full_session_counts_app_key_and_keyless_only() -> None:
    assert counts_toward("", "", "app")
    assert counts_toward("app", "", "app")
    assert not counts_toward("app/sub", "", "app")
    assert not counts_toward("other", "", "app")


def test_full_session_input_takes_child_branches() -> None:
    assert in_summary_input("app/sub", "")
    assert in_summary_input("", "app/sub")


def test_branch_input_takes_its_ancestors_not_its_siblings() -> None:
    """The root agent's turns a sub-agent's prompt shows are in the sub-agent's summary input:
    its boundary hides them (Go leaves them out of the input and loses them)."""
    assert in_summary_input("app", "app/sub")
    assert in_summary_input("app/sub/deep", "app/sub")
    assert not in_summary_input("app/other", "app/sub")
    assert not in_summary_input("app/subway", "app/sub")


def test_the_trigger_index_keeps_to_the_subtree() -> None:
    assert in_subtree("app/sub/deep", "app/sub") and in_subtree("", "app/sub") and in_subtree("app", "")
    assert not in_subtree("app", "app/sub")


def test_ancestors() -> None:
    assert ancestors("app/a/b") == ("app", "app/a", "app/a/b")
    assert ancestors("") == ()


# The guide's allowlist examples ("限制摘要目标") and the Go policy table.
@pytest.mark.parametrize(
    ("allowlist", "cascade", "key", "targets"),
    [
        (None, True, "app/a", ("app/a", "")),
        (None, False, "app/a", ("app/a",)),
        (None, True, "", ("",)),
        (["app/x"], True, "app/a", ("",)),  # allowlist miss still cascades
        (["app/x"], False, "app/a", ()),
        ([], True, "app/a", ("",)),  # explicit empty: no branch key
        ([""], True, "app/a", ("",)),
        ([""], False, "app/a", ()),
        ([], True, "", ("",)),  # the full session is never blocked
        (["app/tool"], True, "app/tool/search", ("app/tool/search", "")),
        (["app/tool/search"], True, "app/tool", ("app/tool", "")),
        (["app/tool"], True, "app/toolbox", ("",)),
        (["app/tool"], True, "other-app/tool", ("",)),
        (["  app/tool  "], False, "app/tool", ("app/tool",)),
    ],
)
def test_summary_targets(allowlist: list[str] | None, cascade: bool, key: str, targets: tuple[str, ...]) -> None:
    assert summary_targets(key, normalize_allowlist(allowlist), cascade) == targets


def test_allowlist_normalization() -> None:
    assert normalize_allowlist(None) is None
    assert normalize_allowlist([" a ", "", "  "]) == frozenset({"a"})
    assert allows_filter_key("", frozenset())
    assert not allows_filter_key("app/a", frozenset())
