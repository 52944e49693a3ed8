from collections.abc import Iterable

from schemas import SessionEvent
from streams.rules.boundaries import to_micros
from streams.rules.checks import ConversationThreshold, EventThreshold, TimeThreshold, TokenThreshold
from streams.rules.policy import SummaryPolicy
from streams.rules.tokens import SimpleTokenCounter
from streams.rules.trigger_state import (
    SessionTriggerState,
    decide,
    evolve,
    mark_emitted,
    new_state,
    on_job_failed,
    on_summary,
)

from .factory import at, ev, summary

SIMPLE = SimpleTokenCounter()


def policy(*checks: object, **kw: object) -> SummaryPolicy:
    return SummaryPolicy(checks=tuple(checks), counter=SIMPLE, **kw)  # type: ignore[arg-type]


def fold(
    events: Iterable[SessionEvent], key: str = "", state: SessionTriggerState | None = None
) -> SessionTriggerState:
    state = state or new_state("app", "u", "s", key)
    for event in events:
        state = evolve(state, event, policy())
    return state


FOUR = [ev("e1", 1), ev("e2", 2), ev("e3", 3), ev("e4", 4)]


def test_counts_only_the_delta_after_an_event_id_boundary() -> None:
    state = on_summary(fold(FOUR), summary(1, "e2", 2))
    assert state.counters.events == 2
    assert [p.event_id for p in state.pending] == ["e3", "e4"]
    assert not decide(state, policy(EventThreshold(2))).fire
    assert decide(state, policy(EventThreshold(1))).fire


def test_timestamp_only_boundary_keeps_same_timestamp_events() -> None:
    state = fold([ev("e1", 1), ev("e2", 2), ev("e2b", 2), ev("e3", 3)])
    state = on_summary(state, summary(1, None, 2))
    assert [p.event_id for p in state.pending] == ["e2", "e2b", "e3"]


def test_future_boundary_empties_the_delta() -> None:
    state = on_summary(fold(FOUR), summary(1, None, 100))
    assert not state.pending and state.counters.events == 0
    assert decide(state, policy(), ev("e5", 101)).reason == "empty_delta"


def test_events_arriving_during_the_summary_stay_counted() -> None:
    state = fold(FOUR)
    state = fold([ev("e5", 5), ev("e6", 6)], state=state)  # the summary covers only up to e4
    state = on_summary(state, summary(1, "e4", 4))
    assert [p.event_id for p in state.pending] == ["e5", "e6"]
    assert state.version == 1 and state.boundary is not None and state.boundary.last_event_id == "e4"


def test_stale_and_foreign_summaries_are_ignored() -> None:
    state = on_summary(fold(FOUR), summary(2, "e2", 2))
    assert on_summary(state, summary(2, "e4", 4)) is state
    assert on_summary(state, summary(1, "e4", 4)) is state
    assert on_summary(state, summary(3, "e4", 4, key="app/x")) is state


def test_equal_to_threshold_does_not_fire() -> None:
    state = fold([ev(f"e{i}", i) for i in range(5)])
    assert not decide(state, policy(EventThreshold(5))).fire
    assert decide(state, policy(EventThreshold(4))).fire
    tokens = state.counters.tokens
    assert not decide(state, policy(TokenThreshold(tokens))).fire
    assert decide(state, policy(TokenThreshold(tokens - 1))).fire


def test_guide_token_examples() -> None:
    long = fold([ev("a", content="x" * 800)])
    short = fold([ev("a", content="x" * 40)])
    assert decide(long, policy(TokenThreshold(100))).fire
    assert not decide(short, policy(TokenThreshold(100))).fire
    reasoning = fold([ev("a", content="ok", reasoning_content="y" * 800)])
    assert decide(reasoning, policy(TokenThreshold(100))).fire


def test_full_session_ignores_child_only_activity() -> None:
    children = [ev(f"c{i}", i, key="app/sub") for i in range(10)]
    state = fold(children)
    assert state.counters.events == 0
    assert len(state.pending) == 10  # still part of the full-session summary input
    own = decide(state, policy(EventThreshold(5)), trigger_key="")
    assert not own.fire
    # a trigger from the branch checks the branch's share of the full delta
    assert decide(state, policy(EventThreshold(5)), trigger_key="app/sub").fire
    root = fold([ev(f"r{i}", i, key="app") for i in range(10)])
    assert root.counters.events == 10


def test_branch_ignores_ancestor_and_sibling_events() -> None:
    events = [ev("root", 1, key="app"), ev("sib", 2, key="app/b"), ev("own", 3, key="app/a/x"), ev("bare", 4)]
    state = fold(events, key="app/a")
    assert [p.event_id for p in state.pending] == ["own", "bare"]
    assert state.counters.events == 2


def test_partial_and_skipped_events_leave_the_state_unchanged() -> None:
    state = fold(FOUR)
    assert evolve(state, ev("p", 5, partial=True)) is state
    assert evolve(state, ev("k", 5, skip_summarization=True)) is state


def test_only_model_output_may_trigger() -> None:
    state = fold([ev("u1", 1, role="user")])
    assert decide(state, policy(), ev("u1", 1, role="user")).reason == "not_triggering"
    state = fold([ev("a1", 2)], state=state)
    assert decide(state, policy(), ev("a1", 2)).fire


def test_tool_result_of_an_incomplete_round_does_not_trigger() -> None:
    call = ev("call", 1, content=None, tool_calls=[("c1", "f", "{}"), ("c2", "g", "{}")])
    r1 = ev("r1", 2, role="tool", content="one", tool_call_id="c1")
    r2 = ev("r2", 3, role="tool", content="two", tool_call_id="c2")
    state = fold([call])
    assert decide(state, policy(), call).reason == "not_triggering"
    state = fold([r1], state=state)
    assert decide(state, policy(), r1).reason == "not_triggering"
    state = fold([r2], state=state)
    assert decide(state, policy(), r2).fire


def test_empty_check_list_fires_whenever_there_is_content() -> None:
    state = fold([ev("a", 1)])
    decision = decide(state, policy())
    assert decision.fire and decision.report is not None and decision.report.name == "always"
    blank = fold([ev("t", 1, role="tool", content=" ", tool_call_id="x")])
    assert decide(blank, policy()).reason == "no_content"


def request(rid: str, start: float, answers: int = 1) -> list[SessionEvent]:
    events = [ev(f"{rid}-u", start, role="user", request_id=rid)]
    events += [ev(f"{rid}-a{i}", start + 1 + i, request_id=rid) for i in range(answers)]
    return events


def test_idle_gap_before_a_new_request_fires_once() -> None:
    time_policy = policy(TimeThreshold(20))
    state = fold(request("r1", 0, answers=3))  # last event at 3s
    state = fold(request("r2", 33), state=state)  # gap 30s, answer at 34s
    decision = decide(state, time_policy, ev("r2-a0", 34, request_id="r2"))
    assert decision.fire and decision.report is not None
    assert decision.report.value == 30000 and decision.report.unit == "ms"
    state = on_summary(state, summary(1, "r2-a0", 34))
    state = fold([ev("r2-a1", 36, request_id="r2")], state=state)
    assert not decide(state, time_policy, ev("r2-a1", 36, request_id="r2")).fire  # the same gap
    state = fold(request("r3", 46), state=state)  # gap of 10s
    assert not decide(state, time_policy, ev("r3-a0", 47, request_id="r3")).fire


def test_gap_is_unavailable_without_request_ids_and_never_uses_the_wall_clock() -> None:
    state = fold([ev("a", 0, request_id=""), ev("b", 10_000, request_id="")])
    assert state.own.activity.gap is None
    assert not decide(state, policy(TimeThreshold(1)), ev("b", 10_000, request_id="")).fire


def test_gap_not_consumed_by_an_older_boundary() -> None:
    state = fold(request("r1", 0) + request("r2", 100))
    state = on_summary(state, summary(1, "r1-a0", 1))
    assert decide(state, policy(TimeThreshold(20)), ev("r2-a0", 101, request_id="r2")).fire


def test_conversation_rounds_count_user_messages_in_the_delta() -> None:
    state = fold(request("r1", 0) + request("r2", 10) + request("r3", 20))
    assert state.counters.rounds == 3
    assert not decide(state, policy(ConversationThreshold(3))).fire
    state = fold(request("r4", 30), state=state)
    assert decide(state, policy(ConversationThreshold(3))).fire
    state = on_summary(state, summary(1, "r4-u", 30))
    assert state.counters.rounds == 0


def test_a_job_in_flight_does_not_hold_the_next_decision_back_and_a_timed_out_one_is_re_emitted() -> None:
    # The decision counts after the decided boundary (job-1's target), not after the applied summary.
    p = policy(job_timeout_s=60)
    state = mark_emitted(fold([ev("a", 0)]), "job-1", "a", to_micros(at(0)))
    assert state.decided_id == "a" and state.counters.events == 0 and state.in_flight is not None
    state = fold([ev("b", 30)], state=state)
    decision = decide(state, p, ev("b", 30))
    assert decision.fire and decision.upto is not None and decision.upto.event_id == "b"
    assert decision.retry_of is None
    queued = mark_emitted(state, "job-2", "b", to_micros(at(30)))
    assert [j.job_id for j in queued.unanswered] == ["job-1", "job-2"] and queued.decided_id == "b"
    state = fold([ev("c", 61)], state=state)
    retry = decide(state, p, ev("c", 61))
    assert retry.retry_of is not None and retry.retry_of.job_id == "job-1"
    again = mark_emitted(state, "job-1", "a", to_micros(at(61)), attempt=1)  # the same job re-emitted
    assert again.decided_id == "a" and again.in_flight is not None and again.in_flight.attempt == 1
    assert again.counters.events == state.counters.events == 2  # the boundary did not move
    assert on_job_failed(state, "job-1").in_flight is None
    assert on_job_failed(state, "other").in_flight is not None
    answered = on_summary(queued, summary(1, "a", 0, job_id="job-1"))
    assert answered.unanswered == (queued.queued[0],) and answered.decided_id == "b"
    assert on_summary(answered, summary(2, "b", 30, job_id="job-2")).in_flight is None


def test_force_skips_checks_but_not_an_empty_delta() -> None:
    state = fold([ev("u", 0, role="user")])
    forced = decide(state, policy(EventThreshold(100)), force=True)
    assert forced.fire and forced.report is not None and forced.report.name == "force"
    empty = new_state("app", "u", "s")
    assert not decide(empty, policy(), force=True).fire


def test_offsets_make_redelivery_harmless() -> None:
    from streams.rules.event_facts import event_facts

    state = new_state("app", "u", "s")
    facts = event_facts(ev("a", 0), SIMPLE, offset=7)
    once = evolve(state, facts)
    assert evolve(once, facts) is once


def test_state_serializes_compactly_and_round_trips() -> None:
    events = [*request("r1", 0, answers=2), ev("b1", 5, key="app/b", model="gpt-4o", context_window=1000)]
    state = mark_emitted(fold(events), "job", "b1", to_micros(at(5)))
    state = on_summary(state, summary(1, "r1-u", 0))
    data = state.to_bytes()
    restored = SessionTriggerState.from_bytes(data)
    assert restored == state
    assert b"hello" not in data  # no message content
    assert len(data) < 600


def test_evolve_is_in_place_and_the_other_transitions_copy_on_write() -> None:
    state = fold(FOUR)
    snapshot = state.copy()
    assert evolve(state, ev("e5", 5), policy()) is state  # folded in place
    assert [p.event_id for p in snapshot.pending] == ["e1", "e2", "e3", "e4"]  # the copy is independent
    assert state.counters.events == 5 and snapshot.counters.events == 4
    before = state.to_bytes()
    advanced = on_summary(state, summary(1, "e2", 2))
    marked = mark_emitted(state, "job-1", "e5", to_micros(at(5)))
    released = on_job_failed(marked, "job-1")
    assert advanced is not state and marked is not state and released is not marked
    assert state.to_bytes() == before and marked.in_flight is not None  # arguments untouched
    assert SessionTriggerState.from_bytes(state.to_bytes()) == state


def test_boundary_version_is_the_format_version_not_the_summary_version() -> None:
    from streams.rules.boundaries import BOUNDARY_FORMAT_VERSION
    from streams.rules.planner import apply_event

    state = on_summary(fold(FOUR), summary(1, "e2", 2))
    state = on_summary(state, summary(2, "e4", 4))
    assert state.version == 2
    assert state.boundary is not None and state.boundary.version == BOUNDARY_FORMAT_VERSION == 1
    p = policy(EventThreshold(0))
    outcome = apply_event(ev("e5", 5), p, {"": state})
    (job,) = outcome.jobs
    assert job.from_version == 2
    assert job.previous_boundary is not None and job.previous_boundary.version == BOUNDARY_FORMAT_VERSION
    assert job.previous_boundary.last_event_id == "e4"


def test_corrupt_state_bytes_raise_a_typed_error_naming_the_part() -> None:
    import json

    import pytest

    from streams.errors import InvalidRecordError
    from streams.rules.errors import CorruptTriggerStateError
    from streams.rules.trigger_state import from_dict, to_dict

    good = to_dict(on_summary(fold(FOUR), summary(1, "e2", 2)))
    cases: list[tuple[object, str]] = [
        ({**good, "f": 99}, "unknown trigger state format 99"),
        ({k: v for k, v in good.items() if k != "p"}, r"app/u/s key '': missing pending index \('p'\)"),
        ({**good, "p": [["e3", 3]]}, r"malformed pending index \('p'\)"),
        ({**good, "b": None}, r"malformed boundary \('b'\)"),
        ({**good, "o": [[1, 2]]}, r"malformed own scope \('o'\)"),
        ({**good, "i": [1, 2, 3, 4, 5, 6, 7]}, r"malformed in-flight job \('i'\)"),
        ({**good, "s": 7}, r"malformed session_id \('s'\): expected a string"),
        ({**good, "v": "1"}, r"malformed version \('v'\): expected an integer"),
        ([1, 2], "must be a JSON object"),
    ]
    for data, message in cases:
        with pytest.raises(CorruptTriggerStateError, match=message) as info:
            from_dict(data)  # type: ignore[arg-type]
        assert isinstance(info.value, InvalidRecordError) and isinstance(info.value, ValueError)
    with pytest.raises(CorruptTriggerStateError, match="not valid JSON"):
        SessionTriggerState.from_bytes(b'{"f": 1, "p": [')
    assert SessionTriggerState.from_bytes(json.dumps(good)) == from_dict(good)


def test_a_given_up_job_gives_its_range_back_even_after_a_re_emission_of_it_was_answered() -> None:
    # The sweep's re-emission of job-1 is answered first ("superseded", not given up): it leaves the
    # queue. The original's give-up then still returns the decided boundary, so its events count again.
    p = policy(EventThreshold(2))
    state = mark_emitted(fold([ev("a", 0), ev("b", 1), ev("c", 2)]), "job-1", "c", to_micros(at(2)))
    assert state.counters.events == 0
    released = on_job_failed(state, "job-1")  # the re-emission's answer
    assert released.in_flight is None and released.decided_id == "c"
    failed = on_job_failed(released, "job-1", gave_up=True)
    assert failed.decided_id is None and failed.counters.events == 3 and failed.failed is not None
    later = ev("d", 3600)  # after the cooldown: the half-open retry covers a..d
    retry = decide(fold([later], state=failed.copy()), p, later)
    assert retry.fire and retry.outcomes[0].value == 4
