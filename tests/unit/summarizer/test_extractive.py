import pytest

from streams.summarizer.extractive import EXTRACTIVE_MODEL_NAME, ExtractiveModel, summarize_extractive
from streams.summarizer.fork import fork_request
from streams.summarizer.summarizer import Summarizer

from .helpers import SESSION, event

CONVERSATION = "\n".join(
    [
        "user: Hi there!",
        "assistant: Sure, happy to help.",
        "user: I want to move the nightly export to S3 bucket acme-exports-eu by Friday.",
        "user: We must keep files encrypted with KMS key alias/exports.",
        'assistant: [Called tool: list_jobs with args: {"env": "prod"}]',
        "assistant: [list_jobs returned: job export-nightly failed at 02:13 with AccessDenied.]",
        "assistant: We decided to grant the role s3:PutObject first. Next we need to rerun the job.",
        "assistant: The weather is nice today and everything else is fine overall.",
    ]
)


def test_keeps_goals_constraints_ids_tool_outcomes_and_open_tasks() -> None:
    text = summarize_extractive(CONVERSATION, max_words=200)
    for needle in ("acme-exports-eu", "alias/exports", "AccessDenied", "decided", "Next we need to rerun"):
        assert needle in text
    assert "happy to help" not in text


@pytest.mark.parametrize("limit", [5, 12, 30, 60])
def test_honours_the_word_limit(limit: int) -> None:
    text = summarize_extractive(CONVERSATION, "user: earlier fact 42 about invoices.", max_words=limit)
    assert 0 < len(text.split()) <= limit


def test_low_value_lines_go_first_under_pressure() -> None:
    text = summarize_extractive(CONVERSATION, max_words=40)
    assert "weather" not in text
    assert "acme-exports-eu" in text


def test_rolls_the_previous_summary_forward_and_is_deterministic() -> None:
    previous = "user: budget is 900 EUR."
    first = summarize_extractive(CONVERSATION, previous, max_words=80)
    assert first.startswith("user: budget is 900 EUR.")
    assert first == summarize_extractive(CONVERSATION, previous, max_words=80)


def test_never_invents_text() -> None:
    text = summarize_extractive(CONVERSATION, max_words=200)
    source_words = set(CONVERSATION.replace("[", " ").replace("]", " ").split())
    for word in text.split():
        assert word in source_words or word in {"called", "with", "returned:"} or word.rstrip("…") in CONVERSATION


async def test_summarizer_with_the_extractive_model_records_its_name() -> None:
    s = Summarizer(ExtractiveModel(), max_summary_words=30)
    result = await s.summarize("", [event(1, "user", "Deploy v2.3.1 to staging."), event(2, "agent", "Done.")])
    assert result.model == EXTRACTIVE_MODEL_NAME
    assert result.report.calls[0].model == EXTRACTIVE_MODEL_NAME
    assert "v2.3.1" in result.text


async def test_extractive_model_reads_a_forked_request() -> None:
    parent = {"messages": [{"role": "system", "content": "rules"}, {"role": "user", "content": "Use port 8443 only."}]}
    response = await ExtractiveModel().complete(fork_request(parent, "summarize"))
    assert response.text == "user: Use port 8443 only."
    assert "rules" not in response.text
    assert SESSION.app_name == "app"


def test_small_talk_alone_still_gives_a_summary() -> None:
    assert summarize_extractive("user: hi\nassistant: hello", max_words=10) == "user: hi\nassistant: hello"
