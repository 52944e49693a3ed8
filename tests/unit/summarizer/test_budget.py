import pytest

from streams.rules.context_windows import register_model_context_window
from streams.rules.fit_search import largest_fitting
from streams.summarizer.budget import (
    TRUNCATION_MARKER,
    halve,
    input_budget,
    resolve_context_window,
    safe_prefix_ends,
    truncate_middle,
)
from streams.summarizer.conversation import DEFAULT_FORMATTER

from .helpers import event, rounds


def test_budget_is_seventy_percent_of_the_window_capped_by_the_provider() -> None:
    assert input_budget(8192) == 5734
    assert input_budget(1000) == 700
    assert input_budget(1000, provider_budget=220) == 220
    assert input_budget(1000, provider_budget=5000) == 700
    assert input_budget(1) == 1
    assert halve(700) == 350
    assert halve(1) == 1


def test_window_resolution_order() -> None:
    register_model_context_window("distill-test-model", 32768)
    assert resolve_context_window(4096, "distill-test-model", 2048) == 4096
    assert resolve_context_window(None, "distill-test-model", 2048) == 2048
    assert resolve_context_window(None, "distill-test-model") == 32768
    assert resolve_context_window(None, "never-heard-of-it") == 8192


def test_a_known_window_skips_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    # The lookup scans every registered name for a prefix: once per job, for nothing, when a window is known.
    from streams.summarizer import budget

    def lookup(model: str | None) -> int | None:
        raise AssertionError("the registry was consulted")

    monkeypatch.setattr(budget, "lookup_context_window", lookup)
    assert resolve_context_window(4096, "echo", 2048) == 4096
    assert resolve_context_window(None, "echo", 2048) == 2048


@pytest.mark.parametrize("keep", [0, 1, 2, 7, 10, 50])
def test_truncate_middle_keeps_head_and_tail(keep: int) -> None:
    text = "HEAD-" + "m" * 30 + "-TAIL"
    cut = truncate_middle(text, keep)
    if keep == 0:
        assert cut == ""
    elif keep >= len(text):
        assert cut == text
    else:
        head, tail = cut.split(TRUNCATION_MARKER)
        assert len(head) == (keep + 1) // 2
        assert len(tail) == keep // 2
        assert text.startswith(head)
        assert text.endswith(tail)


def test_largest_fitting_binary_search() -> None:
    assert largest_fitting(1, 100, lambda n: n <= 37) == 37
    assert largest_fitting(1, 100, lambda n: False) is None
    assert largest_fitting(5, 4, lambda n: True) is None


def test_safe_prefix_ends_stop_after_complete_rounds() -> None:
    events = rounds(3, tools=True)  # user, call, result, answer per round
    assert safe_prefix_ends(events, DEFAULT_FORMATTER) == [3, 4, 7, 8, 11]


def test_safe_prefix_ends_never_inside_an_open_tool_call() -> None:
    events = [
        event(1, "user", "go"),
        event(2, "agent", None, tool_calls=[("a", "t", "{}"), ("b", "t", "{}")]),
        event(3, "agent", "ra", tool_call_id="a"),
        event(4, "agent", "rb", tool_call_id="b"),
        event(5, "agent", "done"),
        event(6, "user", "next"),
    ]
    assert safe_prefix_ends(events, DEFAULT_FORMATTER) == [4, 5]


def test_safe_prefix_ends_poisoned_by_reused_or_anonymous_ids() -> None:
    reused = [
        event(1, "user", "go"),
        event(2, "agent", None, tool_calls=[("a", "t", "{}")]),
        event(3, "agent", "r1", tool_call_id="a"),
        event(4, "agent", "ok"),
        event(5, "agent", None, tool_calls=[("a", "t", "{}")]),
        event(6, "agent", "r2", tool_call_id="a"),
        event(7, "agent", "ok again"),
        event(8, "user", "end"),
    ]
    assert safe_prefix_ends(reused, DEFAULT_FORMATTER) == [3, 4]


def test_safe_prefix_ends_keep_streamed_responses_whole() -> None:
    events = [
        event(1, "user", "go"),
        event(2, "agent", "part one", response_id="r1"),
        event(3, "agent", "part two", response_id="r1"),
        event(4, "user", "more"),
    ]
    assert safe_prefix_ends(events, DEFAULT_FORMATTER) == [3]


def test_safe_prefix_ends_need_new_text() -> None:
    events = [event(1, "user", "go"), event(2, "agent", "a"), event(3, "agent", "  "), event(4, "user", "x")]
    assert safe_prefix_ends(events, DEFAULT_FORMATTER) == [2]
