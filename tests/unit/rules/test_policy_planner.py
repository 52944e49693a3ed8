from schemas import SessionEvent, Summarize, SummarizeSync, SummaryJob
from schemas.settings import SummarySettings
from streams.rules.checks import (
    AllOf,
    AnyOf,
    ConversationThreshold,
    CustomCheck,
    EventThreshold,
    TimeThreshold,
    TokenThreshold,
)
from streams.rules.planner import affected_keys, apply_command, apply_event, job_id_for, session_keys
from streams.rules.policy import (
    SummaryPolicy,
    checks_from_settings,
    default_checks,
    policies_from_settings,
    policy_from_settings,
)
from streams.rules.tokens import SimpleTokenCounter, TiktokenCounter
from streams.rules.trigger_state import SessionTriggerState, new_state

from .factory import at, ev

SIMPLE = SimpleTokenCounter()


def test_default_policy_is_the_go_guide_example() -> None:
    policy = SummaryPolicy()
    assert policy.checks == default_checks()
    (any_of,) = policy.checks
    assert isinstance(any_of, AnyOf)
    assert any_of.checks == (EventThreshold(20), TokenThreshold(4000), TimeThreshold(300))
    assert policy.max_summary_words == 200 and policy.cascade_full_session and policy.allowlist is None


def test_settings_build_checks_with_composition() -> None:
    assert checks_from_settings(SummarySettings()) == default_checks()
    assert checks_from_settings(SummarySettings(event_threshold=5)) == (EventThreshold(5),)
    both = checks_from_settings(SummarySettings(event_threshold=5, token_threshold=10, composition="all"))
    assert both == (AllOf((EventThreshold(5), TokenThreshold(10))),)
    either = checks_from_settings(SummarySettings(event_threshold=5, token_threshold=10, composition="any"))
    assert either == (AnyOf((EventThreshold(5), TokenThreshold(10))),)


def test_configured_thresholds_are_anded_by_default() -> None:
    """Both guides AND the configured checks; only the built-in default is an any-of."""
    assert SummarySettings().composition == "all"
    checks = checks_from_settings(SummarySettings(event_threshold=10, token_threshold=2000))
    assert checks == (AllOf((EventThreshold(10), TokenThreshold(2000))),)
    policies = policies_from_settings(
        SummarySettings(apps={"chat": {"conversation_threshold": 3, "time_threshold_s": 60}})
    )
    assert policies.for_app("chat").checks == (AllOf((TimeThreshold(60), ConversationThreshold(3))),)
    assert policies.default.checks == default_checks()


def test_anded_thresholds_wait_for_both() -> None:
    events = [ev(f"e{i}", i, content="short") for i in range(12)]
    anded = policy_from_settings(SummarySettings(event_threshold=10, token_threshold=2000), counter=SIMPLE)
    assert run(events, anded)[1] == []
    ored = policy_from_settings(
        SummarySettings(event_threshold=10, token_threshold=2000, composition="any"), counter=SIMPLE
    )
    assert [j.trigger.name for j in run(events, ored)[1]] == ["event_threshold"]  # type: ignore[attr-defined]


def test_per_app_overrides_replace_checks_and_keep_the_rest() -> None:
    settings = SummarySettings(
        event_threshold=20,
        filter_key_allowlist=["a/x"],
        token_counter="tiktoken",
        apps={"chat": {"conversation_threshold": 3}, "quiet": {"cascade_full_session": False}},
    )
    policies = policies_from_settings(settings)
    assert policies.for_app("other").checks == (EventThreshold(20),)
    chat = policies.for_app("chat")
    assert chat.checks == (ConversationThreshold(3),)
    assert chat.allowlist == frozenset({"a/x"}) and isinstance(chat.counter, TiktokenCounter)
    quiet = policies.for_app("quiet")
    assert quiet.checks == (EventThreshold(20),) and not quiet.cascade_full_session


def run(events: list[SessionEvent], policy: SummaryPolicy) -> tuple[dict[str, SessionTriggerState], list[object]]:
    table: dict[str, SessionTriggerState] = {}
    jobs: list[object] = []
    for offset, event in enumerate(events):
        keys = affected_keys(event, policy, table.get(""))
        outcome = apply_event(event, policy, {k: table.get(k) for k in keys}, offset=offset)
        assert set(outcome.states) == set(keys)
        table.update(outcome.states)
        jobs.extend(outcome.jobs)
    return table, jobs


def test_affected_keys_cover_ancestors_known_and_keyless() -> None:
    policy = SummaryPolicy(counter=SIMPLE, checks=(EventThreshold(100),))
    table, _ = run([ev("a", 1, key="app/a"), ev("b", 2, key="app/a/x"), ev("c", 3, key="app/b")], policy)
    assert set(table) == {"", "app/a", "app/a/x", "app/b"}
    assert affected_keys(ev("d", 4, key="app/a/x/y"), policy, table[""]) == ("", "app/a", "app/a/x", "app/a/x/y")
    assert set(affected_keys(ev("e", 5), policy, table[""])) == {"", "app/a", "app/a/x", "app/b"}
    blocked = SummaryPolicy(counter=SIMPLE, allowlist=frozenset())
    assert affected_keys(ev("f", 6, key="app/a"), blocked, table[""]) == ("",)
    assert set(session_keys(table[""], policy)) == {"", "app/a", "app/a/x", "app/b"}


def test_branch_trigger_cascades_to_the_full_session() -> None:
    policy = SummaryPolicy(counter=SIMPLE, checks=(EventThreshold(2),))
    events = [ev("u", 0, role="user")] + [ev(f"a{i}", i + 1, key="app/sub") for i in range(2)]
    table, jobs = run(events, policy)
    assert [j.filter_key for j in jobs] == ["app/sub", ""]  # type: ignore[attr-defined]
    branch_job, full_job = jobs
    assert full_job.cascade_full_session and full_job.trigger.detail == "trigger_key=app/sub"  # type: ignore[attr-defined]
    assert branch_job.upto.last_event_id == "a1" and branch_job.upto.offset == 2  # type: ignore[attr-defined]
    assert branch_job.trigger.name == "event_threshold" and branch_job.trigger.value == 3  # type: ignore[attr-defined]
    assert table["app/sub"].in_flight is not None and table[""].in_flight is not None
    # Both keys decided up to a1: their counting restarts after it, whether or not the jobs are answered.
    assert table[""].decided_id == table["app/sub"].decided_id == "a1" and table[""].counters.events == 0
    quiet, _ = run(events, SummaryPolicy(counter=SIMPLE, checks=(EventThreshold(100),)))
    assert quiet[""].counters.events == 1  # the full session's own count ignores the child branch
    assert branch_job.job_id == job_id_for(new_state("app", "u", "s", "app/sub"), "a1")  # type: ignore[attr-defined]


def test_no_cascade_and_disallowed_branch_emit_nothing() -> None:
    policy = SummaryPolicy(counter=SIMPLE, checks=(), allowlist=frozenset(), cascade_full_session=False)
    _, jobs = run([ev("a", 1, key="app/sub")], policy)
    assert jobs == []


def test_user_messages_never_emit_jobs() -> None:
    _, jobs = run([ev("u", 0, role="user")], SummaryPolicy(counter=SIMPLE, checks=()))
    assert jobs == []


def test_commands() -> None:
    policy = SummaryPolicy(counter=SIMPLE, checks=(EventThreshold(100),))
    table, _ = run([ev("u", 0, role="user"), ev("a", 1)], policy)
    base = {"app_name": "app", "user_id": "u", "session_id": "s", "command_id": "c1"}
    lazy = apply_command(Summarize(**base), policy, table, at=at(5))
    assert not lazy.jobs and lazy.decisions[0].reason == "checks_failed"
    forced = apply_command(Summarize(**base, force=True), policy, table, at=at(5))
    (job,) = forced.jobs
    assert job.trigger.name == "force" and job.origin == "command" and job.force and job.created_at == at(5)
    sync = apply_command(SummarizeSync(**base, reply_to="corr-1"), policy, table, at=at(6))
    assert sync.jobs[0].reply_to == "corr-1"
    empty = apply_command(SummarizeSync(**base, reply_to="corr-2"), policy, {}, at=at(6))
    assert not empty.jobs and empty.decisions[0].reason == "empty_delta"


def test_counter_from_settings_uses_the_model_encoding() -> None:
    from streams.rules.policy import counter_from_settings, policy_from_settings

    tiktoken = SummarySettings(token_counter="tiktoken", tiktoken_default_encoding="cl100k_base")
    assert counter_from_settings(tiktoken).name == "tiktoken:cl100k_base"  # no model: the configured default
    by_model = counter_from_settings(tiktoken, "gpt-4o-mini")
    assert isinstance(by_model, TiktokenCounter) and by_model.encoding_name == "o200k_base"
    assert counter_from_settings(tiktoken, "unknown-model").name == "tiktoken:cl100k_base"
    policy = policy_from_settings(tiktoken, model="gpt-4.1")
    assert policy.counter is not None and policy.counter.name == "tiktoken:o200k_base"
    policies = policies_from_settings(
        SummarySettings(token_counter="tiktoken", apps={"a": {"event_threshold": 3}}), "gpt-3.5-turbo"
    )
    for chosen in (policies.default, policies.for_app("a")):
        assert chosen.counter is not None and chosen.counter.name == "tiktoken:cl100k_base"


def test_sync_command_on_a_branch_summarizes_only_that_key() -> None:
    """``CreateSessionSummary``: no cascade, with or without a model request, forced or not."""
    quiet = SummaryPolicy(counter=SIMPLE, checks=(EventThreshold(100),))
    table, _ = run([ev("u", 0, role="user", key="app/b"), ev("a", 1, key="app/b")], quiet)
    policy = SummaryPolicy(counter=SIMPLE, checks=())
    base = {"app_name": "app", "user_id": "u", "session_id": "s", "command_id": "c1", "filter_key": "app/b"}
    request = {"messages": [{"role": "user", "content": "hi"}]}
    for force in (False, True):
        for model_request in (request, None):
            sync = apply_command(
                SummarizeSync(**base, reply_to="r", model_request=model_request, force=force), policy, table, at=at(5)
            )
            (job,) = sync.jobs
            assert job.filter_key == "app/b" and job.reply_to == "r" and job.model_request == model_request
            assert [d.filter_key for d in sync.decisions] == ["app/b"] and "" not in sync.states
    full = apply_command(
        SummarizeSync(**{**base, "filter_key": ""}, reply_to="r", model_request=request), policy, table, at=at(5)
    )
    (full_job,) = full.jobs
    assert full_job.filter_key == "" and full_job.model_request == request


def test_async_command_on_a_branch_still_cascades() -> None:
    """``EnqueueSummaryJob``: the worker cascades to the full session, also for a refused key."""
    quiet = SummaryPolicy(counter=SIMPLE, checks=(EventThreshold(100),))
    table, _ = run([ev("u", 0, role="user", key="app/b"), ev("a", 1, key="app/b")], quiet)
    base = {"app_name": "app", "user_id": "u", "session_id": "s", "command_id": "c1", "filter_key": "app/b"}
    plain = apply_command(Summarize(**base, force=True), SummaryPolicy(counter=SIMPLE, checks=()), table, at=at(5))
    assert [j.filter_key for j in plain.jobs] == ["app/b", ""]
    refused = SummaryPolicy(counter=SIMPLE, checks=(), allowlist=frozenset({"app/other"}))
    assert [j.filter_key for j in apply_command(Summarize(**base, force=True), refused, table, at=at(5)).jobs] == [""]


def test_sync_command_on_a_key_the_allowlist_refuses_does_nothing() -> None:
    quiet = SummaryPolicy(counter=SIMPLE, checks=(EventThreshold(100),))
    table, _ = run([ev("u", 0, role="user", key="app/b"), ev("a", 1, key="app/b")], quiet)
    refused = SummaryPolicy(counter=SIMPLE, checks=(), allowlist=frozenset({"app/other"}))
    base = {"app_name": "app", "user_id": "u", "session_id": "s", "command_id": "c1", "filter_key": "app/b"}
    for force in (False, True):
        outcome = apply_command(SummarizeSync(**base, reply_to="r", force=force), refused, table, at=at(5))
        assert outcome.jobs == () and outcome.states == {}
        assert [(d.filter_key, d.fire, d.reason) for d in outcome.decisions] == [("app/b", False, "not_allowed")]
    allowed = SummaryPolicy(counter=SIMPLE, checks=(), allowlist=frozenset({"app"}))  # an ancestor matches
    (job,) = apply_command(SummarizeSync(**base, reply_to="r"), allowed, table, at=at(5)).jobs
    assert job.filter_key == "app/b"


def test_unforced_sync_command_keeps_the_thresholds() -> None:
    """The same-run path calls ``CreateSessionSummary(..., force=false)``: thresholds apply."""
    policy = SummaryPolicy(counter=SIMPLE, checks=(EventThreshold(100),))
    table, _ = run([ev("u", 0, role="user"), ev("a", 1)], policy)
    base = {"app_name": "app", "user_id": "u", "session_id": "s", "command_id": "c1", "reply_to": "r"}
    lazy = apply_command(SummarizeSync(**base, force=False), policy, table, at=at(5))
    assert not lazy.jobs and [d.reason for d in lazy.decisions] == ["checks_failed"]
    (job,) = apply_command(SummarizeSync(**base, force=True), policy, table, at=at(5)).jobs
    assert job.trigger.name == "force"


def test_build_job_refuses_a_decision_that_does_not_fire() -> None:
    import pytest

    from streams.errors import PermanentError
    from streams.rules.planner import build_job
    from streams.rules.trigger_state import decide

    policy = SummaryPolicy(counter=SIMPLE, checks=(EventThreshold(100),))
    table, _ = run([ev("u", 0, role="user"), ev("a", 1)], policy)
    decision = decide(table[""], policy, None)
    assert not decision.fire
    with pytest.raises(PermanentError, match=r"only a fired decision.*reason 'checks_failed'") as info:
        build_job(table[""], decision, created_at=at(2))
    assert isinstance(info.value, ValueError)


def test_important_keywords_from_settings_fire_the_important_content_check() -> None:
    from streams.rules.checks import ImportantContent
    from streams.rules.policy import policy_from_settings
    from streams.rules.trigger_state import on_summary

    from .factory import summary

    policy = policy_from_settings(SummarySettings(important_keywords=["Deadline", "  ", "budget cut"]))
    assert policy.checks == (ImportantContent(None, ("deadline", "budget cut")),)
    assert policy.important_keywords == ("deadline", "budget cut")
    policy = SummaryPolicy(counter=SIMPLE, checks=policy.checks)
    table, jobs = run([ev("u", 0, role="user", content="plan the week"), ev("a", 1, content="sure")], policy)
    assert jobs == [] and table[""].counters.keywords == 0
    # A keyword anywhere in the delta (here a user message) makes the next model output fire.
    table, jobs = run(
        [
            ev("u", 0, role="user", content="plan the week"),
            ev("a", 1, content="sure"),
            ev("u2", 2, role="user", content="The DEADLINE moved to Friday"),
            ev("a2", 3, content="noted"),
        ],
        policy,
    )
    (job,) = jobs
    assert isinstance(job, SummaryJob)
    assert (job.trigger.name, job.trigger.unit, job.trigger.value, job.trigger.threshold) == (
        "important_content",
        "matches",
        1,
        0,
    )
    # Once a job is decided over it, the match no longer counts (also after a changelog round trip,
    # and once the summary is applied).
    state = table[""]
    assert state.decided_id == "a2" and state.counters.keywords == 0
    assert SessionTriggerState.from_bytes(state.to_bytes()) == state
    after = on_summary(state, summary(1, "a2", 3))
    assert after.counters.keywords == 0


def test_keywords_with_a_length_threshold_and_nested_and_per_app() -> None:
    from streams.rules.checks import ImportantContent
    from streams.rules.policy import policy_from_settings

    both = policy_from_settings(SummarySettings(important_content_threshold=50, important_keywords=["refund"]))
    assert both.checks == (ImportantContent(50, ("refund",)),)
    nested = SummaryPolicy(checks=(AnyOf((EventThreshold(100), AllOf((ImportantContent(None, ("X ",)),)))),))
    assert nested.important_keywords == ("x",)
    policies = policies_from_settings(
        SummarySettings(event_threshold=5, apps={"support": {"important_keywords": ["refund"]}})
    )
    assert policies.default.important_keywords == ()
    assert policies.for_app("support").checks == (ImportantContent(None, ("refund",)),)  # replaces the base checks
    assert policies.for_app("support").important_keywords == ("refund",)
    policy = SummaryPolicy(counter=SIMPLE, checks=(ImportantContent(50, ("refund",)),))
    _, long_text = run([ev("a", 0, content="y" * 51)], policy)
    assert [j.trigger.unit for j in long_text] == ["chars"]  # type: ignore[attr-defined]
    _, keyword = run([ev("a", 0, content="Refund issued")], policy)
    assert [j.trigger.unit for j in keyword] == ["matches"]  # type: ignore[attr-defined]


def test_request_context_reaches_custom_checks_and_travels_on_the_job() -> None:
    """The Go guide's ctx marker: a custom check fires for requests marked async, whatever the count."""
    marked = CustomCheck(lambda view, ctx: view.counters.events > 5 or ctx.get("entry") == "async")
    policy = SummaryPolicy(counter=SIMPLE, checks=(marked,), context={"tenant": "t1"})
    plain = [ev("e1", 1, role="user"), ev("e2", 2)]
    assert run(plain, policy)[1] == []
    tagged = [ev("e1", 1, role="user"), ev("e2", 2, context={"entry": "async", "model": "small"})]
    (job,) = run(tagged, policy)[1]
    assert isinstance(job, SummaryJob) and job.context == {"entry": "async", "model": "small"}
    states = run(plain, policy)[0]
    quiet = Summarize(app_name="app", user_id="u", session_id="s", command_id="c1")
    assert apply_command(quiet, policy, dict(states), at=at(3)).jobs == ()
    asked = quiet.model_copy(update={"context": {"entry": "async"}})
    (cjob,) = apply_command(asked, policy, dict(states), at=at(3)).jobs
    assert cjob.context == {"entry": "async"} and cjob.origin == "command"
