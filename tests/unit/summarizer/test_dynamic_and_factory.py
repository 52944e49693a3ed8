import logging
from collections.abc import Mapping
from typing import Any

import pytest
from pydantic import SecretStr

from schemas import SessionKey
from schemas.settings import LLMSettings, Settings, SummarySettings
from streams.errors import ConfigurationError, PermanentError
from streams.rules.policy import policies_from_settings
from streams.summarizer.dynamic import DynamicSummarizer
from streams.summarizer.extractive import EXTRACTIVE_MODEL_NAME, ExtractiveModel
from streams.summarizer.factory import build_model, build_summarizer, summary_settings_for
from streams.summarizer.prompts import PromptError
from streams.summarizer.summarizer import Summarizer, SummarizerLike, SummarySkipped

from .helpers import SESSION, ScriptedModel, rounds, user_text


def tenant_resolver(context: Mapping[str, Any], session: SessionKey | None) -> SummarizerLike | None:
    if context.get("tenant") == "acme":
        return Summarizer(ScriptedModel("acme summary"))
    return None


async def test_dynamic_delegates_to_the_resolved_summarizer() -> None:
    dyn = DynamicSummarizer(tenant_resolver)
    result = await dyn.summarize("", rounds(1), context={"tenant": "acme"}, session=SESSION)
    assert result.text == "acme summary"
    assert dyn.metadata() == {"type": "dynamic"}


async def test_dynamic_none_skips_automatic_and_fails_forced() -> None:
    dyn = DynamicSummarizer(tenant_resolver)
    with pytest.raises(SummarySkipped):
        await dyn.summarize("", rounds(1), context={"tenant": "other"}, session=SESSION)
    with pytest.raises(PermanentError, match="no dynamic summarizer resolved for session s1"):
        await dyn.summarize("", rounds(1), context={}, session=SESSION, force=True)


async def test_dynamic_async_resolver_and_self_reference() -> None:
    async def resolver(context: Mapping[str, Any], session: SessionKey | None) -> SummarizerLike | None:
        return dyn

    dyn = DynamicSummarizer(resolver)
    with pytest.raises(ConfigurationError):
        await dyn.summarize("", rounds(1))


def test_extractive_is_the_default_without_key_or_url() -> None:
    assert isinstance(build_model(LLMSettings()), ExtractiveModel)
    summarizer = build_summarizer(Settings())
    assert summarizer.model.name == EXTRACTIVE_MODEL_NAME
    assert summarizer.prompts.max_summary_words == 200


def test_a_key_or_base_url_selects_the_openai_adapter() -> None:
    from streams.summarizer.openai_adapter import OpenAIChatModel

    for llm in (LLMSettings(api_key=SecretStr("k")), LLMSettings(base_url="http://127.0.0.1:9/v1")):
        model = build_model(llm)
        assert isinstance(model, OpenAIChatModel)
        assert model.name == "gpt-4o-mini"


def test_settings_shape_the_summarizer_and_per_app_overrides() -> None:
    settings = Settings(
        summary=SummarySettings(
            max_summary_words=50,
            keep_recent_rounds=2,
            max_summary_length=400,
            apps={"support": {"max_summary_words": 80}},
        ),
        llm=LLMSettings(base_url="http://127.0.0.1:9/v1", context_window=16000),
    )
    s = build_summarizer(settings)
    assert s.prompts.max_summary_words == 50 and s.max_summary_length == 400
    assert s.skip_recent is not None and s.input_budget() == 11200
    assert summary_settings_for(settings, "support").max_summary_words == 80
    assert build_summarizer(settings, app_name="support").prompts.max_summary_words == 80


def test_invalid_configured_prompt_fails_at_build_time() -> None:
    settings = Settings(summary=SummarySettings(prompt="Summarize please", max_summary_words=10))
    with pytest.raises(PromptError, match=r"prompt\.conversation_text_required") as info:
        build_summarizer(settings)
    assert info.value.rule == "prompt.conversation_text_required"
    assert isinstance(info.value, ConfigurationError)
    with pytest.raises(PromptError) as no_limit:
        build_summarizer(Settings(summary=SummarySettings(prompt="Summarize please", max_summary_words=None)))
    assert no_limit.value.rule == "prompt.conversation_text_required"


# The Python guide's custom prompt: only {conversation_text}, no {max_summary_words}.
GUIDE_PROMPT = """\
请总结以下对话，重点关注：
1. 关键决策
2. 重要信息
3. 行动计划

对话内容：
{conversation_text}

总结："""


async def test_the_python_guides_prompt_works_with_the_default_word_limit(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="streams.summarizer.prompts")
    settings = Settings(summary=SummarySettings(prompt=GUIDE_PROMPT))
    assert settings.summary.max_summary_words == 200
    model = ScriptedModel("guide summary")
    summarizer = build_summarizer(settings, model=model)
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.rule for r in warned] == ["prompt.max_summary_words_required"]  # type: ignore[attr-defined]
    assert "关键决策" not in warned[0].getMessage()
    assert policies_from_settings(settings.summary, settings.llm.model).default.max_summary_words == 200
    result = await summarizer.summarize("", rounds(1), session=SESSION)
    assert result.text == "guide summary"
    (request,) = model.requests
    assert "对话内容：\nuser:" in user_text(request) and "200" not in user_text(request)


def test_summarizer_budget_counts_with_the_policy_counter() -> None:
    from streams.rules.policy import policies_from_settings
    from streams.rules.tokens import SimpleTokenCounter, TiktokenCounter

    settings = Settings(summary=SummarySettings(token_counter="tiktoken"), llm=LLMSettings(model="gpt-4"))
    counter = build_summarizer(settings).counter()
    assert isinstance(counter, TiktokenCounter) and counter.name == "tiktoken:cl100k_base"
    policy_counter = policies_from_settings(settings.summary, settings.llm.model).default.counter
    assert policy_counter is not None and policy_counter.name == counter.name

    simple = build_summarizer(Settings(summary=SummarySettings(approx_runes_per_token=2.0))).counter()
    assert isinstance(simple, SimpleTokenCounter) and simple.approx_runes_per_token == 2.0
    # Per-app overrides choose the counter too; an injected counter wins.
    per_app = Settings(summary=SummarySettings(apps={"support": {"token_counter": "tiktoken"}}))
    assert build_summarizer(per_app, app_name="support").counter().name == "tiktoken:o200k_base"
    injected = SimpleTokenCounter(3.0)
    assert build_summarizer(settings, token_counter=injected).counter() is injected
