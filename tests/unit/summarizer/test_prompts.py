import json
import logging

import pytest

from streams.summarizer.extractive import ExtractiveModel
from streams.summarizer.prompts import (
    PromptError,
    build_prompts,
    default_fork_prompt,
    default_prompt,
    placeholders,
    render,
)
from streams.summarizer.request import ChatRequest
from streams.summarizer.summarizer import Summarizer

from .golden import check_golden
from .helpers import SESSION, ScriptedModel, event


def test_default_prompt_golden() -> None:
    check_golden("default_prompt.txt", default_prompt())
    check_golden("default_prompt_words.txt", default_prompt(150))
    check_golden("default_fork_prompt_words.txt", default_fork_prompt(150))


def test_default_prompt_content_rules() -> None:
    text = default_prompt().lower()
    for needle in ("decision", "constraint", "open", "tool", "do not add instructions", "cut off", "error"):
        assert needle in text
    assert "{max_summary_words}" not in default_prompt()
    assert "{max_summary_words}" in default_prompt(10)
    assert "{previous_summary}" not in default_prompt()


def test_placeholder_syntax() -> None:
    found = [(p.name, p.optional) for p in placeholders('{a} {{b}} {c?} {"json": 1} { spaced } {`x`}')]
    assert found == [("a", False), ("b", False), ("c", True)]
    assert render('{{conversation_text}} / {x?} / {"k": [1]}', {"conversation_text": "T"}) == 'T /  / {"k": [1]}'


@pytest.mark.parametrize(
    ("kwargs", "rule"),
    [
        ({"prompt": "Summarize this."}, "prompt.conversation_text_required"),
        ({"prompt": "{conversation_text} {foo}"}, "prompt.unknown_placeholder"),
        ({"system_prompt": "Be brief. {conversation_text}"}, "system_prompt.no_conversation_placeholders"),
        ({"system_prompt": "Update {previous_summary}"}, "system_prompt.no_conversation_placeholders"),
        ({"fork_prompt": "Summarize {conversation_text}"}, "fork_prompt.no_conversation_placeholders"),
        ({"fork_prompt": "Roll {previous_summary} forward"}, "fork_prompt.no_conversation_placeholders"),
    ],
)
def test_invalid_prompts_are_rejected_at_configuration(kwargs: dict, rule: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(PromptError) as info:
        build_prompts(**kwargs)
    assert info.value.rule == rule
    assert rule in str(info.value)
    with pytest.raises(PromptError):
        Summarizer(ScriptedModel(), **kwargs)


def test_unstated_word_limit_is_only_a_warning_at_configuration(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="streams.summarizer.prompts")
    prompt = "Secret house style. Summarize {conversation_text}"
    prompts = build_prompts(prompt=prompt, max_summary_words=100)
    assert prompts.render_prompt("user: hi") == "Secret house style. Summarize user: hi"
    assert not prompts.states_word_limit
    (record,) = caplog.records
    assert record.levelno == logging.WARNING and record.rule == "prompt.max_summary_words_required"  # type: ignore[attr-defined]
    assert record.max_summary_words == 100  # type: ignore[attr-defined]
    assert "not stated to the model" in record.getMessage() and "Secret" not in record.getMessage()
    caplog.clear()
    Summarizer(ScriptedModel(), prompt=prompt, max_summary_words=100)
    assert [r.rule for r in caplog.records] == ["prompt.max_summary_words_required"]  # type: ignore[attr-defined]
    caplog.clear()
    build_prompts(prompt=prompt)  # no limit: nothing to state
    build_prompts(prompt="In {max_summary_words} words: {conversation_text}", max_summary_words=100)
    assert caplog.records == []


def test_word_limit_placeholder_may_live_in_the_system_prompt() -> None:
    prompts = build_prompts(
        prompt='Data: {"keep": true}\n<conversation>\n{conversation_text}\n</conversation>',
        system_prompt="Stay within {max_summary_words} words.",
        max_summary_words=100,
    )
    assert prompts.render_system() == "Stay within 100 words."
    assert prompts.render_prompt("user: hi").startswith('Data: {"keep": true}')


def test_set_prompt_validates_and_ignores_empty() -> None:
    s = Summarizer(ScriptedModel(), max_summary_words=50)
    before = s.prompts
    s.set_prompt("")
    assert s.prompts == before
    with pytest.raises(PromptError, match="max_summary_words_required"):
        s.set_prompt("Summarize {conversation_text}")
    assert s.prompts == before
    s.set_prompt("In {max_summary_words} words: {conversation_text}")
    assert s.prompts.prompt.startswith("In {max_summary_words}")
    assert s.prompts.version != before.version


def test_set_model_none_is_ignored_and_metadata() -> None:
    s = Summarizer(ScriptedModel(name="m1"), max_summary_words=20, name="tenant-a")
    s.set_model(None)
    s.set_model(ScriptedModel(name="m2"))
    meta = s.metadata()
    assert meta["model_name"] == "m2"
    assert meta["summarizer_name"] == "tenant-a"
    assert meta["max_summary_words"] == 20
    assert meta["skip_recent_enabled"] is False


async def _first_request(summarizer: Summarizer, previous: str, events: list) -> ChatRequest:  # type: ignore[type-arg]
    model = summarizer.model
    assert isinstance(model, ScriptedModel)
    await summarizer.summarize(previous, events, session=SESSION)
    return model.requests[0]


async def test_previous_summary_placeholder_separates_inputs() -> None:
    prompt = "<previous>{previous_summary}</previous>\n<new>{conversation_text}</new>"
    request = await _first_request(Summarizer(ScriptedModel(), prompt=prompt), "old", [event(1, "user", "hi")])
    assert request.messages == [{"role": "user", "content": "<previous>old</previous>\n<new>user: hi</new>"}]
    request = await _first_request(Summarizer(ScriptedModel(), prompt=prompt), "", [event(1, "user", "hi")])
    assert request.messages[0]["content"] == "<previous></previous>\n<new>user: hi</new>"


async def test_without_placeholder_previous_summary_is_merged_first_line() -> None:
    request = await _first_request(
        Summarizer(ScriptedModel(), prompt="C:\n{conversation_text}"), "old facts", [event(1, "user", "hi")]
    )
    assert request.messages[0]["content"] == "C:\nsystem: old facts\nuser: hi"


async def test_system_prompt_is_sent_first() -> None:
    s = Summarizer(ScriptedModel(), system_prompt="Be faithful.", prompt="{conversation_text}")
    request = await _first_request(s, "", [event(1, "user", "hi")])
    assert request.messages == [{"role": "system", "content": "Be faithful."}, {"role": "user", "content": "user: hi"}]


CONVERSATIONS = {
    "plain": [
        event(1, "user", "Plan a 3-day trip to Lisbon in May; budget 900 EUR."),
        event(2, "agent", "Day 1: Alfama and the castle. Day 2: Belém. Day 3: Sintra."),
    ],
    "tools": [
        event(1, "user", "Why is build #4812 red?"),
        event(2, "agent", None, tool_calls=[("c1", "ci_log", '{"build": 4812}')]),
        event(
            3, "agent", "ERROR test_payment_refund: timeout after 30s (log truncated)", tool_call_id="c1", name="ci_log"
        ),
        event(4, "agent", "The refund test timed out; the log was truncated.", reasoning_content="hidden"),
        event(5, "agent", "partial chunk", partial=True),
    ],
}


@pytest.mark.parametrize("name", sorted(CONVERSATIONS))
async def test_rendered_requests_golden(name: str) -> None:
    for words in (None, 120):
        s = Summarizer(ScriptedModel(), max_summary_words=words)
        request = await _first_request(s, "Earlier: user prefers trains.", CONVERSATIONS[name])
        suffix = f"_{words}w" if words else ""
        check_golden(f"request_{name}{suffix}.json", json.dumps(request.messages, indent=2, ensure_ascii=False) + "\n")


@pytest.mark.parametrize("name", sorted(CONVERSATIONS))
async def test_extractive_summaries_golden(name: str) -> None:
    s = Summarizer(ExtractiveModel(), max_summary_words=60)
    result = await s.summarize("user: prefers trains.", CONVERSATIONS[name], session=SESSION)
    check_golden(f"extractive_{name}.txt", result.text + "\n")
