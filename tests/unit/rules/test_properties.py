"""Property tests: the fold agrees with recomputation, loses nothing, and replays exactly."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import SessionEvent
from streams.rules.boundaries import events_after
from streams.rules.counters import Counters
from streams.rules.event_facts import event_facts
from streams.rules.filter_keys import counts_toward, in_subtree
from streams.rules.planner import affected_keys, apply_event
from streams.rules.policy import SummaryPolicy
from streams.rules.tokens import SimpleTokenCounter
from streams.rules.trigger_state import SessionTriggerState, evolve, new_state, on_summary

from .factory import ev, summary

KEYS = ["", "app", "app/a", "app/a/x", "app/b"]
COUNTER = SimpleTokenCounter()
POLICY = SummaryPolicy(counter=COUNTER)


@st.composite
def sessions(draw: st.DrawFn) -> list[SessionEvent]:
    n = draw(st.integers(min_value=0, max_value=25))
    events: list[SessionEvent] = []
    clock = 0.0
    request = 0
    for i in range(n):
        clock += draw(st.sampled_from([0.0, 0.5, 3.0, 400.0]))
        kind = draw(st.sampled_from(["user", "answer", "call", "result", "empty"]))
        if kind == "user":
            request += 1
        common = {
            "key": draw(st.sampled_from(KEYS)),
            "request_id": f"r{request}",
            "partial": draw(st.booleans()) and draw(st.booleans()),
            "skip_summarization": draw(st.booleans()) and draw(st.booleans()),
        }
        text = "w" * draw(st.integers(min_value=0, max_value=60))
        if kind == "user":
            event = ev(f"e{i}", clock, role="user", content=text or "hi", **common)
        elif kind == "call":
            event = ev(f"e{i}", clock, content=None, tool_calls=[(f"c{i}", "f", "{}")], **common)
        elif kind == "result":
            event = ev(f"e{i}", clock, role="tool", content=text, tool_call_id=f"c{i - 1}", **common)
        elif kind == "empty":
            event = ev(f"e{i}", clock, content=None, **common)
        else:
            event = ev(f"e{i}", clock, content=text, **common)
        events.append(event)
    return events


def fold(events: list[SessionEvent], key: str) -> SessionTriggerState:
    state = new_state("app", "u", "s", key)
    for event in events:
        state = evolve(state, event, POLICY)
    return state


def expected_counters(events: list[SessionEvent], key: str) -> Counters:
    facts = [event_facts(e, COUNTER) for e in events if not e.partial and not e.skip_summarization]
    return Counters.of(f.entry for f in facts if counts_toward(f.filter_key, key, "app"))


@settings(max_examples=150, deadline=None)
@given(events=sessions(), key=st.sampled_from(KEYS), cut=st.integers(min_value=0), by_id=st.booleans())
def test_fold_then_boundary_equals_recomputation(events: list[SessionEvent], key: str, cut: int, by_id: bool) -> None:
    state = fold(events, key)
    # A summary's boundary is always a summarized event: never partial nor skipped.
    members = [e for e in events if in_subtree(e.filter_key, key) and not e.partial and not e.skip_summarization]
    if members and (by_id or cut % 2):
        target = members[cut % len(members)]
        s = summary(1, target.event_id if by_id else None, (target.timestamp - events[0].timestamp).total_seconds())
        state = on_summary(state, s.model_copy(update={"filter_key": key}))
        delta = [e for e in events_after(events, s.boundary) if in_subtree(e.filter_key, key)]
    else:
        delta = [e for e in events if in_subtree(e.filter_key, key)]
    assert state.counters == expected_counters(delta, key)
    counted = [e for e in delta if not e.partial and not e.skip_summarization]
    assert [p.event_id for p in state.pending] == [e.event_id for e in counted]


@settings(max_examples=150, deadline=None)
@given(events=sessions(), key=st.sampled_from(KEYS), cuts=st.lists(st.integers(min_value=0), max_size=6))
def test_no_pending_event_is_dropped_or_double_counted(events: list[SessionEvent], key: str, cuts: list[int]) -> None:
    state = new_state("app", "u", "s", key)
    covered: list[str] = []
    cut_iter = iter(cuts)
    version = 0
    for i, event in enumerate(events):
        state = evolve(state, event, POLICY)
        if i % 3 == 2 and state.pending:
            cut = next(cut_iter, None)
            if cut is None:
                continue
            target = state.pending[cut % len(state.pending)]
            index = state.pending.index(target)
            covered.extend(p.event_id for p in state.pending[: index + 1])
            version += 1
            s = summary(version, target.event_id, 0, key=key)
            state = on_summary(state, s)
    remaining = [p.event_id for p in state.pending]
    all_members = [
        e.event_id for e in events if in_subtree(e.filter_key, key) and not e.partial and not e.skip_summarization
    ]
    assert sorted(covered + remaining) == sorted(all_members)
    assert len(set(covered + remaining)) == len(covered) + len(remaining)


def replay(events: list[SessionEvent], through_bytes: bool) -> list[tuple[object, ...]]:
    table: dict[str, SessionTriggerState] = {}
    trace: list[tuple[object, ...]] = []
    for offset, event in enumerate(events):
        keys = affected_keys(event, POLICY, table.get(""))
        outcome = apply_event(event, POLICY, {k: table.get(k) for k in keys}, offset=offset)
        for k, state in outcome.states.items():
            table[k] = SessionTriggerState.from_bytes(state.to_bytes()) if through_bytes else state
        trace.extend((d.filter_key, d.fire, d.reason, d.report) for d in outcome.decisions)
        trace.extend((j.job_id, j.filter_key, j.upto, j.trigger) for j in outcome.jobs)
    return trace


@settings(max_examples=80, deadline=None)
@given(events=sessions())
def test_decisions_are_a_pure_function_of_the_events(events: list[SessionEvent]) -> None:
    first = replay(events, through_bytes=False)
    assert replay(events, through_bytes=False) == first
    assert replay(events, through_bytes=True) == first  # the changelog round trip changes nothing
