"""The events a summary holds back (keep_recent_rounds, skip_recent_events) and the next trigger."""

from schemas import SessionEvent
from schemas.settings import SummarySettings
from streams.rules.checks import ConversationThreshold, EventThreshold, TokenThreshold
from streams.rules.counters import F_USER, PendingEvent
from streams.rules.held_back import all_held_back, held_back_prefix
from streams.rules.policy import SummaryPolicy, policy_from_settings
from streams.rules.tokens import SimpleTokenCounter
from streams.rules.trigger_state import SessionTriggerState, decide, evolve, new_state, on_summary

from .factory import ev, summary


def entries(pattern: str) -> list[PendingEvent]:
    """``u`` a user turn, ``a`` anything else."""
    return [PendingEvent(f"p{i}", i, 1, "", F_USER if c == "u" else 0, 1) for i, c in enumerate(pattern)]


def rounds(n: int, start: int = 0, author: str = "user") -> list[SessionEvent]:
    out = []
    for r in range(start, start + n):
        out.append(ev(f"u{r}", 2 * r, role="user", author=author, content=f"第{r}轮问题"))
        out.append(ev(f"a{r}", 2 * r + 1, content=f"第{r}轮回答"))
    return out


def fold(events: list[SessionEvent], state: SessionTriggerState | None = None) -> SessionTriggerState:
    state = state or new_state("app", "u", "s")
    for event in events:
        evolve(state, event, SummaryPolicy(counter=SimpleTokenCounter()))
    return state


def policy(*checks: object, keep: int = 0, skip: int = 0) -> SummaryPolicy:
    return SummaryPolicy(
        checks=tuple(checks),  # type: ignore[arg-type]
        counter=SimpleTokenCounter(),
        keep_recent_rounds=keep,
        skip_recent_events=skip,
    )


def test_held_back_prefix_runs_to_the_first_new_round() -> None:
    assert held_back_prefix(entries("auauaua"), 2, 0) == 5  # a u a u a | u a
    assert held_back_prefix(entries("uaua"), 2, 0) == 4  # everything is still held back
    assert held_back_prefix(entries("uaua"), 0, 3) == 3
    assert held_back_prefix(entries("uauaua"), 1, 3) == 3  # the larger hold-back wins
    assert held_back_prefix(entries("ua"), 0, 5) == 2
    assert held_back_prefix(entries("uaua"), 0, 0) == 0


def test_all_held_back_when_nothing_precedes_the_kept_rounds() -> None:
    assert all_held_back(entries("uaua"), 2, 0)
    assert all_held_back(entries("aua"), 2, 0)  # fewer user turns than kept rounds
    assert not all_held_back(entries("auaua"), 2, 0)
    assert all_held_back(entries("uauau"), 0, 5)
    assert not all_held_back(entries("uauaua"), 0, 5)
    assert not all_held_back(entries("ua"), 0, 0)


def test_policy_knows_the_summarizers_hold_back_from_settings() -> None:
    built = policy_from_settings(SummarySettings(conversation_threshold=3, keep_recent_rounds=4, skip_recent_events=2))
    assert (built.keep_recent_rounds, built.skip_recent_events) == (4, 2)


def test_no_job_while_a_pass_would_hold_back_every_event() -> None:
    state = fold(rounds(4))
    decision = decide(state, policy(ConversationThreshold(3), keep=4), ev("a3", 7))
    assert (decision.fire, decision.reason) == (False, "held_back")
    state = fold(rounds(1, start=4), state)
    assert decide(state, policy(ConversationThreshold(3), keep=4), ev("a4", 9)).fire


def test_rounds_held_back_by_the_last_summary_do_not_count_again() -> None:
    check = ConversationThreshold(3)
    state = fold(rounds(5))
    state = on_summary(state, summary(1, "a0", 1))  # round 0 summarized, rounds 1-4 held back
    assert state.counters.rounds == 4  # still pending (visible, summarized later) ...
    assert [p.event_id for p in state.pending][:2] == ["u1", "a1"]
    for r in range(5, 8):
        state = fold(rounds(1, start=r), state)
        decision = decide(state, policy(check, keep=4), ev(f"a{r}", 2 * r + 1))
        assert not decision.fire, r  # ... but only the new rounds count
        assert decision.outcomes[0].value == r - 4
    state = fold(rounds(1, start=8), state)
    decision = decide(state, policy(check, keep=4), ev("a8", 17))
    assert decision.fire and decision.report is not None and decision.report.value == 4


def test_held_back_events_and_tokens_do_not_count_again() -> None:
    state = on_summary(fold(rounds(5)), summary(1, "a0", 1))
    fresh = fold(rounds(1, start=5), new_state("app", "u", "s"))
    decision = decide(fold(rounds(1, start=5), state), policy(EventThreshold(0), TokenThreshold(0), keep=4))
    assert [o.value for o in decision.outcomes] == [2, fresh.counters.tokens]
    # without a hold-back configured everything after the boundary counts, as before
    after = on_summary(fold(rounds(5)), summary(1, "a0", 1))
    plain = decide(fold(rounds(1, start=5), after), policy(EventThreshold(0)))
    assert plain.outcomes[0].value == 10


def test_a_producer_naming_its_user_counts_rounds() -> None:
    state = fold(rounds(4, author="alice"))
    assert state.counters.rounds == 4
    assert decide(state, policy(ConversationThreshold(3))).fire


def test_per_app_hold_back_reaches_that_apps_policy() -> None:
    from streams.rules.policy import policies_from_settings

    settings = SummarySettings(keep_recent_rounds=4, apps={"x": {"keep_recent_rounds": 2, "conversation_threshold": 1}})
    policies = policies_from_settings(settings)
    assert policies.default.keep_recent_rounds == 4
    assert policies.for_app("x").keep_recent_rounds == 2
