from typing import Any

import pytest

from streams.rules.checks import (
    AllOf,
    AnyOf,
    CheckOutcome,
    ContextThreshold,
    ConversationThreshold,
    CustomCheck,
    EventThreshold,
    ImportantContent,
    TimeThreshold,
    TokenThreshold,
    TriggerView,
    preferred_outcome,
)
from streams.rules.context_windows import lookup_context_window, register_model_context_window
from streams.rules.counters import Activity, Counters


def view(
    events: int = 0,
    tokens: int = 0,
    rounds: int = 0,
    text_len: int = 0,
    gap_s: float | None = None,
    model: str | None = None,
    window: int | None = None,
    context: dict[str, Any] | None = None,
    keywords: int = 0,
) -> TriggerView:
    gap = int(gap_s * 1_000_000) if gap_s is not None else None
    return TriggerView(
        "",
        "",
        "app",
        Counters(events, tokens, rounds, text_len, keywords),
        Activity(gap=gap, model=model, context_window=window),
        None,
        None,
        context or {},
    )


def passes(check: Any, v: TriggerView) -> bool:
    passed, _ = check.evaluate(v)
    return bool(passed)


def test_event_threshold_is_strict() -> None:
    assert passes(EventThreshold(5), view(events=10))
    assert not passes(EventThreshold(5), view(events=5))
    assert not passes(EventThreshold(0), view(events=0))


def test_token_threshold_is_strict() -> None:
    assert passes(TokenThreshold(100), view(tokens=200))
    assert not passes(TokenThreshold(100), view(tokens=100))


def test_time_threshold_reports_milliseconds_and_needs_an_observation() -> None:
    passed, (outcome,) = TimeThreshold(20).evaluate(view(gap_s=30))
    assert passed and outcome.value == 30000 and outcome.threshold == 20000 and outcome.unit == "ms"
    assert not passes(TimeThreshold(20), view(gap_s=10))
    assert not passes(TimeThreshold(20), view(gap_s=20))
    passed, (outcome,) = TimeThreshold(0).evaluate(view(gap_s=None))
    assert not passed and outcome.value == 0


@pytest.mark.parametrize(
    ("model", "window", "ratio", "min_tokens", "expected_threshold"),
    [
        (None, None, 0.5, 2000, 4096),  # unknown model: fallback 8192 x 0.5
        ("deepseek-chat", None, 0.5, 2000, 65536),
        ("deepseek-chat", None, 0.9, 2000, 117964),
        ("unknown-model", 1000, 0.5, 2000, 2000),  # min tokens clamp
        ("unknown-model", 1000, 0.5, 0, 500),
        ("deepseek-chat", 10000, 0.4, 2000, 4000),  # explicit window beats the registry
    ],
)
def test_context_threshold(
    model: str | None, window: int | None, ratio: float, min_tokens: int, expected_threshold: int
) -> None:
    check = ContextThreshold(ratio, min_tokens)
    _, (outcome,) = check.evaluate(view(tokens=0, model=model, window=window))
    assert outcome.threshold == expected_threshold
    assert passes(check, view(tokens=expected_threshold + 1, model=model, window=window))
    assert not passes(check, view(tokens=expected_threshold, model=model, window=window))


def test_context_threshold_report_fields() -> None:
    _, (outcome,) = ContextThreshold(0.4).evaluate(view(tokens=5000, window=10000))
    assert outcome == CheckOutcome("context_threshold", True, 5000, 4000, "tokens", 10000, 0.4)
    report = outcome.report()
    assert report.name == "context_threshold" and report.window == 10000 and report.ratio == 0.4


def test_context_threshold_validates_options() -> None:
    with pytest.raises(ValueError):
        ContextThreshold(ratio=0)
    with pytest.raises(ValueError):
        ContextThreshold(fallback_window=0)


def test_invalid_options_are_configuration_errors() -> None:
    from streams.errors import ConfigurationError
    from streams.rules.tokens import SimpleTokenCounter

    with pytest.raises(ConfigurationError, match=r"context_threshold: ratio must be in \(0, 1\], got 1.5"):
        ContextThreshold(ratio=1.5)
    with pytest.raises(ConfigurationError, match="min_tokens must be >= 0"):
        ContextThreshold(min_tokens=-1)
    with pytest.raises(ConfigurationError, match="context window of 'x' must be > 0"):
        register_model_context_window("x", 0)
    with pytest.raises(ConfigurationError, match="approx_runes_per_token"):
        SimpleTokenCounter(0)


def test_model_switch_changes_the_context_threshold() -> None:
    check = ContextThreshold()
    assert passes(check, view(tokens=5000, model="gpt-4"))
    assert not passes(check, view(tokens=5000, model="gpt-4o"))


def test_context_fallback_is_the_summary_models_window() -> None:
    """Go: without an explicit fallback, the summarizer model's window (instance, then registry)."""
    from schemas.settings import SummarySettings
    from streams.rules.policy import checks_from_settings, policies_from_settings

    def fallback(settings: SummarySettings, **model: Any) -> int:
        (check,) = checks_from_settings(settings, **model)
        assert isinstance(check, ContextThreshold)
        return check.fallback_window

    on = SummarySettings(context_threshold=True)
    assert on.context_fallback_window is None
    assert fallback(on) == 8192
    assert fallback(on, model="unknown-model") == 8192
    assert fallback(on, model="gpt-4o") == 128000
    assert fallback(on, model="gpt-4o", model_context_window=32000) == 32000
    explicit = SummarySettings(context_threshold=True, context_fallback_window=4096)
    assert fallback(explicit, model="gpt-4o", model_context_window=32000) == 4096
    # An event naming no model is judged against the summary model's window (64000 = 128000 × 0.5).
    (check,) = checks_from_settings(on, model="gpt-4o-mini")
    assert not passes(check, view(tokens=60000)) and passes(check, view(tokens=64001))
    assert passes(check, view(tokens=5000, model="gpt-4"))  # the event's own model still wins
    policies = policies_from_settings(
        SummarySettings(context_threshold=True, apps={"a": {"context_ratio": 0.25}}),
        "gpt-4o",
        model_context_window=1000,
    )
    assert [p.checks for p in (policies.default, policies.for_app("a"))] == [
        (ContextThreshold(0.5, 2000, 1000),),
        (ContextThreshold(0.25, 2000, 1000),),
    ]


def test_registry_lookup_and_registration() -> None:
    assert lookup_context_window("openai/gpt-4o") == 128000
    assert lookup_context_window("gpt-4o-2024-08-06") == 128000
    assert lookup_context_window("gpt-4o-mini-2024-07-18") == 128000
    assert lookup_context_window("my-custom-model") is None
    register_model_context_window("my-custom-model", 32768)
    assert lookup_context_window("My-Custom-Model") == 32768
    with pytest.raises(ValueError):
        register_model_context_window("x", 0)


def test_a_name_asked_again_has_the_same_answer_until_a_registration_changes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from streams.rules import context_windows

    monkeypatch.setattr(context_windows, "_registry", dict(context_windows._BUILTIN))
    monkeypatch.setattr(context_windows, "_found", {})
    asked = ["gpt-4o-2024-08-06", "vendor/claude-sonnet-4:beta", "my-later-model-v2", "never-heard-of-it"]
    first = [lookup_context_window(m) for m in asked]
    assert first == [128000, 200000, None, None]
    assert [lookup_context_window(m) for m in asked] == first  # answered from what was found
    register_model_context_window("my-later-model", 65536)
    assert lookup_context_window("my-later-model-v2") == 65536  # a registration is seen at once
    monkeypatch.setattr(context_windows, "_FOUND_MAX", 3)
    for n in range(10):  # producers' names: the remembered ones stay bounded
        assert lookup_context_window(f"unknown-{n}") is None
    assert len(context_windows._found) <= 3


def test_conversation_and_important_content() -> None:
    assert passes(ConversationThreshold(3), view(rounds=4))
    assert not passes(ConversationThreshold(3), view(rounds=3))
    assert passes(ImportantContent(), view(text_len=11))
    assert not passes(ImportantContent(), view(text_len=10))


def test_composition_short_circuits_and_nests() -> None:
    calls: list[str] = []

    def spy(name: str, result: bool) -> CustomCheck:
        def fn(_: TriggerView, __: Any) -> bool:
            calls.append(name)
            return result

        return CustomCheck(fn)

    assert passes(AnyOf((spy("a", True), spy("b", True))), view())
    assert calls == ["a"]
    calls.clear()
    assert not passes(AllOf((spy("a", False), spy("b", True))), view())
    assert calls == ["a"]
    nested = AllOf((EventThreshold(1), AnyOf((TokenThreshold(1000), TimeThreshold(60)))))
    assert passes(nested, view(events=2, gap_s=61))
    assert not passes(nested, view(events=2, gap_s=59))
    assert not passes(nested, view(events=1, tokens=5000))


def test_custom_check_receives_state_view_and_context() -> None:
    check = CustomCheck(lambda v, ctx: v.counters.events > 1 and ctx.get("async") is True)
    assert passes(check, view(events=2, context={"async": True}))
    assert not passes(check, view(events=2))


def test_preferred_outcome_order() -> None:
    ev_ = CheckOutcome("event_threshold", True, 30, 20, "events")
    tok = CheckOutcome("token_threshold", True, 5000, 4000, "tokens")
    time_ = CheckOutcome("time_threshold", True, 1, 0, "ms")
    failed = CheckOutcome("event_threshold", False, 1, 20, "events")
    assert preferred_outcome([time_, ev_, tok]) == tok
    assert preferred_outcome([time_, ev_]) == ev_
    custom = CheckOutcome("custom", True, 1, 0, "")
    assert preferred_outcome([failed, custom]) == custom
    assert preferred_outcome([failed]) == failed
    assert preferred_outcome([]) is None


def test_important_content_keywords() -> None:
    from streams.errors import ConfigurationError

    keywords = ImportantContent(None, ("Deadline", " deadline ", ""))
    assert keywords.keywords == ("deadline",)
    assert not passes(keywords, view())
    assert passes(keywords, view(keywords=1))
    either = ImportantContent(10, ("deadline",))
    assert passes(either, view(text_len=11)) and passes(either, view(keywords=2))
    assert not passes(either, view(text_len=10))
    with pytest.raises(ConfigurationError, match="chars\\) or keywords"):
        ImportantContent(None)
    with pytest.raises(ConfigurationError, match="not one string"):
        ImportantContent(10, "deadline")  # type: ignore[arg-type]
