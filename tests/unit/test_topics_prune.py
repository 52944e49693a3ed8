"""``distill topics prune``: which names a prefix selects, which prefixes are refused."""

from __future__ import annotations

import pytest

from schemas.settings import Settings
from streams.clients.topics_prune import check_prefixes, matching
from streams.errors import ConfigurationError


def test_matching_selects_only_names_under_a_prefix() -> None:
    names = ["t-1a2b.events", "t-1a2b.jobs", "distill-test-9f-track-state-changelog", "distill.summaries", "tx"]
    assert matching(names, ["t-", "distill-test-"]) == [
        "distill-test-9f-track-state-changelog", "t-1a2b.events", "t-1a2b.jobs",
    ]  # fmt: skip
    assert matching(names, ["bench-"]) == []


@pytest.mark.parametrize("prefix", ["distill", "distill.", "d", ""])
def test_a_prefix_of_the_live_names_or_too_short_is_refused(prefix: str) -> None:
    with pytest.raises(ConfigurationError):
        check_prefixes([prefix], Settings())


def test_no_prefix_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="at least one"):
        check_prefixes([], Settings())


def test_run_prefixes_are_accepted() -> None:
    assert check_prefixes(["t-", "bench-", "distill-test-"], Settings()) == ("t-", "bench-", "distill-test-")
