import copy
import json

import pytest

from streams.errors import PermanentError
from streams.rules.tokens import SimpleTokenCounter
from streams.summarizer.fork import TOOL_ARGS_OMITTED, fit_fork, fork_request, skip_cascade_after_fork
from streams.summarizer.request import count_request

COUNTER = SimpleTokenCounter()
TOOL = {"type": "function", "function": {"name": "search", "description": "d" * 400, "parameters": {}}}


def parent(result_size: int = 40) -> dict:  # type: ignore[type-arg]
    return {
        "model": "gpt-4o",
        "stream": True,
        "stream_options": {"include_usage": True},
        "response_format": {"type": "json_object"},
        "temperature": 0.2,
        "messages": [
            {"role": "system", "content": "You are a helper."},
            {"role": "user", "content": "find the report"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "search", "arguments": '{"q": "' + "r" * 200 + '"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "x" * result_size},
            {"role": "assistant", "content": "Found it."},
        ],
        "tools": [TOOL],
    }


def test_fork_clones_and_appends_the_prompt() -> None:
    original = parent()
    snapshot = copy.deepcopy(original)
    forked = fork_request(original, "SUMMARIZE ABOVE")
    assert original == snapshot
    assert forked.messages[:-1] == snapshot["messages"]
    assert forked.messages[-1] == {"role": "user", "content": "SUMMARIZE ABOVE"}
    assert forked.tools == [TOOL]
    assert forked.params == {"temperature": 0.2, "stream": False}


def test_fork_refuses_a_request_without_conversation() -> None:
    with pytest.raises(PermanentError, match="no conversation content"):
        fork_request({"messages": [{"role": "system", "content": "only rules"}]}, "S")
    with pytest.raises(PermanentError):
        fork_request({"tools": []}, "S")


def test_fit_drops_tool_schemas_first() -> None:
    forked = fork_request(parent(), "S")
    without_tools = count_request(forked, COUNTER) - 110
    fitted = fit_fork(forked, without_tools + 5, COUNTER)
    assert fitted is not None
    assert fitted.tools == []
    assert fitted.messages == forked.messages
    assert forked.tools == [TOOL]


def test_fit_replaces_largest_payloads_with_markers_and_keeps_every_turn() -> None:
    forked = fork_request(parent(result_size=4000), "S")
    fitted = fit_fork(forked, 100, COUNTER)
    assert fitted is not None
    assert count_request(fitted, COUNTER) <= 100
    assert len(fitted.messages) == len(forked.messages)
    tool_message = fitted.messages[3]
    assert tool_message["content"].startswith("[Tool result left out")
    assert 'tool_call_id="c1"' in tool_message["content"]
    assert 'tool_name="search"' in tool_message["content"]
    # The result saved the most, so the (smaller) call arguments stayed.
    assert fitted.messages[2]["tool_calls"][0]["function"]["arguments"] != TOOL_ARGS_OMITTED


def test_fit_also_compacts_arguments_when_needed() -> None:
    forked = fork_request(parent(result_size=4000), "S")
    fitted = fit_fork(forked, 80, COUNTER)
    assert fitted is not None
    args = fitted.messages[2]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(args) == json.loads(TOOL_ARGS_OMITTED)


def test_fit_gives_up_rather_than_dropping_turns() -> None:
    forked = fork_request(parent(), "S")
    assert fit_fork(forked, 10, COUNTER) is None


def test_cascade_skipped_only_for_a_forked_branch_pass() -> None:
    assert skip_cascade_after_fork("app/branch", fork_used=True)
    assert not skip_cascade_after_fork("app/branch", fork_used=False)
    assert not skip_cascade_after_fork("", fork_used=True)
