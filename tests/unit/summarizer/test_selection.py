from streams.summarizer.selection import combine_skips, keep_recent_rounds, select_events, skip_last

from .helpers import event, rounds


def ids(events: list) -> list[str]:  # type: ignore[type-arg]
    return [e.event_id for e in events]


def test_no_skip_keeps_all_summarizable_events() -> None:
    events = [event(1, "user", "a"), event(2, "agent", "b", partial=True), event(3, "agent", "c")]
    selected, held = select_events(events)
    assert ids(selected) == ["e1", "e3"]
    assert held == 0


def test_skip_last_two_keeps_head_with_a_user_message() -> None:
    events = rounds(3)
    selected, held = select_events(events, skip_last(2))
    assert ids(selected) == ids(events[:4])
    assert held == 2


def test_skip_everything_or_more_selects_nothing() -> None:
    events = rounds(2)
    assert select_events(events, skip_last(4)) == ([], 4)
    assert select_events(events, skip_last(10)) == ([], 4)


def test_head_without_user_message_is_dropped_unless_a_summary_precedes() -> None:
    events = [event(1, "agent", "tool chain", tool_calls=[("c", "t", "{}")]), event(2, "agent", "r", tool_call_id="c")]
    events.append(event(3, "user", "next"))
    assert select_events(events, skip_last(1)) == ([], 3)
    selected, _ = select_events(events, skip_last(1), has_previous_summary=True)
    assert ids(selected) == ["e1", "e2"]


def test_chain_after_summary_dropped_when_formatters_exclude_everything() -> None:
    from streams.summarizer.conversation import ConversationFormatter

    fmt = ConversationFormatter(tool_call=lambda c: "", tool_result=lambda m: "")
    events = [event(1, "agent", None, tool_calls=[("c", "t", "{}")]), event(2, "agent", "r", tool_call_id="c")]
    events.append(event(3, "user", "next"))
    assert select_events(events, skip_last(1), has_previous_summary=True, formatter=fmt) == ([], 3)


def test_keep_recent_rounds_counts_user_rounds() -> None:
    events = rounds(5, tools=True)  # 4 events per round
    selected, held = select_events(events, keep_recent_rounds(2))
    assert held == 8
    assert ids(selected) == ids(events[:12])


def test_keep_recent_rounds_with_fewer_rounds_keeps_everything_back() -> None:
    events = rounds(2)
    assert select_events(events, keep_recent_rounds(3)) == ([], 4)


def test_keep_recent_never_splits_a_tool_call_from_its_result() -> None:
    # The agent called a tool, the user spoke, then the result arrived.
    events = [
        event(1, "user", "start the export"),
        event(2, "agent", None, tool_calls=[("c1", "export", "{}")]),
        event(3, "user", "also, use CSV"),
        event(4, "agent", "done", tool_call_id="c1", name="export"),
        event(5, "agent", "Exported as CSV."),
    ]
    selected, held = select_events(events, keep_recent_rounds(1))
    assert ids(selected) == ["e1"]
    assert held == 4


def test_combined_skips_take_the_larger() -> None:
    events = rounds(4)
    skip = combine_skips(skip_last(1), keep_recent_rounds(2))
    assert skip is not None
    assert skip(events) == 4
    assert combine_skips(None, None) is None


def test_keep_recent_rounds_finds_user_turns_by_role_not_author() -> None:
    # A producer naming its user: author "alice", role "user". Rounds are user turns by role.
    events = []
    for r in range(3):
        events.append(event(2 * r, "alice", f"question {r}", role="user"))
        events.append(event(2 * r + 1, "agent", f"answer {r}"))
    selected, held = select_events(events, keep_recent_rounds(2))
    assert ids(selected) == ["e0", "e1"]
    assert held == 4


def test_an_assistant_message_authored_user_opens_no_round() -> None:
    events = [event(0, "user", "question"), event(1, "user", "an answer labelled user", role="assistant")]
    events.append(event(2, "user", "next question"))
    # two user turns (e0, e2): keeping two rounds back keeps everything back
    assert select_events(events, keep_recent_rounds(2)) == ([], 3)
