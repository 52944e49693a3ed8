"""Oracle: ``max_summary_length`` never loses history quietly.

The Python guide's summarizer (trpc-agent-py's ``SessionSummarizer``) does not tell
the model the limit and cuts the answer at ``max_summary_length`` characters plus
``...``, reporting nothing; the cut text is then the only copy of what lies before
the boundary. distill states the limit in every request, asks the model once to
shorten an answer that is still over it, and reports the cut it makes only when
that fails too (``SummaryReport.length_cut``, an INFO line without content).

The model is the scripted OpenAI-compatible server through the real ``openai``
client: a verbose model (:class:`MarkerEcho` with prose around every marker, well
past the cap) that writes tersely when asked to shorten its own answer. Every
event carries a marker glued to CJK text; every marker must survive.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from pydantic import SecretStr

from schemas.settings import LLMSettings
from streams.context import AssemblyOptions, assemble
from streams.errors import RetryableError
from streams.summarizer.openai_adapter import OpenAIChatModel
from streams.summarizer.prompts import build_prompts
from streams.summarizer.report import report_of
from streams.summarizer.summarizer import Summarizer
from tests.support.markers import MarkerBook, find_markers
from tests.support.openai_server import (
    SHORTENED,
    EchoStyle,
    MarkerEcho,
    OpenAIServer,
    answer,
    empty_answer,
    request_text,
    server_error,
)
from tests.unit.context.sessions import Session, summary_at

from .helpers import SESSION

# The Python guide's own Chinese prompt (自定义提示模板): it does not mention a length.
GUIDE_PROMPT_ZH = (
    "请总结以下对话，重点关注：\n1. 关键决策\n2. 重要信息\n3. 行动计划\n\n对话内容：\n{conversation_text}\n\n总结："
)
CAP = 600
VERBOSE = EchoStyle(
    "请总结以下对话", "对话摘要：", "。", "。", "关于{}，用户确认了行程安排、预算和时间，并要求保留所有细节以便稍后继续"
)
"""A model that ignores the limit: about 45 characters of prose per marker, sentence after sentence."""


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer(default=MarkerEcho(styles=(SHORTENED, VERBOSE))) as srv:
        yield srv


def model_for(server: OpenAIServer) -> OpenAIChatModel:
    return OpenAIChatModel(
        LLMSettings(base_url=server.base_url, api_key=SecretStr("k"), model="summary-model", context_window=64_000)
    )


def session(book: MarkerBook, rounds: int, start: int = 0, s: Session | None = None) -> Session:
    s = s or Session()
    for i in range(start, start + rounds):
        s.user(f"第{i}轮：请帮我订去里斯本的机票{book.mint(f'e{len(s.events) + 1}')}并记下来")
        s.answer(f"好的，已经订好五月{i}日的航班{book.mint(f'e{len(s.events) + 1}')}，还需要酒店吗")
    return s


def answered(server: OpenAIServer, n: int) -> str:
    reply = server.requests[n].reply
    assert reply is not None and reply.text is not None
    return reply.text


def lost_markers(text: str, book: MarkerBook) -> dict[str, list[str]]:
    shown = set(find_markers(text))
    return {e: [m for m in ms if m not in shown] for e, ms in book.by_event.items() if set(ms) - shown}


async def test_a_verbose_answer_is_shortened_by_the_model_not_cut(server: OpenAIServer) -> None:
    book = MarkerBook()
    s = session(book, 8)
    summarizer = Summarizer(model_for(server), prompt=GUIDE_PROMPT_ZH, max_summary_length=CAP, max_summary_words=None)

    first = await summarizer.summarize("", s.events, session=SESSION)
    verbose = answered(server, 0)
    assert len(verbose) > CAP, "the scripted model must write past the cap for this test to mean anything"
    assert len(first.text) <= CAP
    assert not lost_markers(first.text, book), "the cap cut events of the summarized rounds out of the summary"
    assert [c.mode for c in first.report.calls] == ["standalone", "shorten"] and first.report.length_cut is None

    # Rolled forward, with more rounds: the second summary holds the first's markers too.
    n = len(s.events)
    session(book, 6, start=8, s=s)
    second = await summarizer.summarize(first.text, s.events[n:], session=SESSION)
    assert len(second.text) <= CAP and second.report.length_cut is None
    assert not lost_markers(second.text, book), "an event of a summarized round is in no summary"

    after = assemble("你是助手。", summary_at(second.last_event, second.text), s.events, "新问题",
                     options=AssemblyOptions(add_session_summary=True))  # fmt: skip
    assert not lost_markers("\n".join(str(m) for m in after.messages), book)


async def test_the_request_states_the_limit_even_when_the_prompt_does_not(server: OpenAIServer) -> None:
    book = MarkerBook()
    s = session(book, 2)
    summarizer = Summarizer(model_for(server), prompt=GUIDE_PROMPT_ZH, max_summary_length=CAP, max_summary_words=None)
    await summarizer.summarize("", s.events, session=SESSION)
    sent = server.requests[0].body["messages"]
    assert sent[0]["role"] == "system" and f"at most {CAP} characters" in sent[0]["content"]
    assert sent[-1]["content"].startswith("请总结以下对话"), "the guide's prompt is sent as it was written"

    # The default prompt states it itself (no extra system message), like the word limit.
    default = build_prompts(max_summary_length=CAP)
    assert f"at most {CAP} characters" in default.render_prompt("user: hi")
    assert default.length_note() == "" and f"at most {CAP} characters" in default.render_fork()
    # No limit configured: the requests are what they were (the pinned cache addresses hold).
    assert "characters" not in build_prompts().render_prompt("user: hi") + build_prompts().render_fork()


async def test_a_cut_that_still_happens_is_reported_without_its_content(
    server: OpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    # So many rounds that even the terse rewrite (the markers alone) is over the cap.
    book = MarkerBook()
    s = session(book, 40)
    summarizer = Summarizer(model_for(server), prompt=GUIDE_PROMPT_ZH, max_summary_length=300, max_summary_words=None)
    with caplog.at_level(logging.INFO, logger="streams.summarizer.summarizer"):
        result = await summarizer.summarize("", s.events, session=SESSION)

    cut = result.report.length_cut
    rewrite = answered(server, 1)
    assert cut is not None and 0 < len(result.text) == cut.kept_chars <= 300
    assert (cut.max_chars, cut.answer_chars, cut.rewrite_chars) == (300, len(answered(server, 0)),
                                                                     len(rewrite))  # fmt: skip
    assert rewrite.startswith(result.text.removesuffix("…")), "the shorter text is the one cut"
    lines = [r for r in caplog.records if r.getMessage() == "summary cut to max_summary_length"]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO
    assert lines[0].__dict__["kept_chars"] == cut.kept_chars and lines[0].__dict__["session_id"] == SESSION.session_id
    assert not find_markers(str(lines[0].__dict__)), "the log line carries no summary content"


def verbose_answer(summarizer: Summarizer, s: Session) -> str:
    """What the verbose model answers to the summary request of ``s``."""
    prompt = summarizer.prompts.render_prompt(summarizer.formatter.conversation_text(s.events))
    return MarkerEcho(styles=(VERBOSE,)).summary(request_text({"messages": [{"role": "user", "content": prompt}]}))


async def test_a_rewrite_without_text_falls_back_to_a_reported_cut(server: OpenAIServer) -> None:
    book = MarkerBook()
    s = session(book, 8)
    summarizer = Summarizer(model_for(server), prompt=GUIDE_PROMPT_ZH, max_summary_length=CAP, max_summary_words=None)
    verbose = verbose_answer(summarizer, s)
    server.script(answer(verbose), empty_answer(), empty_answer())  # asked again once, like a summary call

    result = await summarizer.summarize("", s.events, session=SESSION)
    assert [(c.mode, c.outcome) for c in result.report.calls] == [
        ("standalone", "ok"), ("shorten", "retried"), ("shorten", "failed")]  # fmt: skip
    cut = result.report.length_cut
    assert cut is not None and cut.rewrite_chars is None and cut.answer_chars == len(verbose) > CAP
    assert 0 < len(result.text) <= CAP and verbose.startswith(result.text)


async def test_a_transient_failure_of_the_rewrite_fails_the_job_instead_of_cutting(server: OpenAIServer) -> None:
    book = MarkerBook()
    s = session(book, 8)
    summarizer = Summarizer(model_for(server), prompt=GUIDE_PROMPT_ZH, max_summary_length=CAP, max_summary_words=None)
    server.script(answer(verbose_answer(summarizer, s)), *[server_error(503)] * 4)  # the client's retries too

    with pytest.raises(RetryableError) as failed:
        await summarizer.summarize("", s.events, session=SESSION)
    report = report_of(failed.value)
    assert report is not None and report.length_cut is None  # the job is retried: nothing was cut nor stored
    assert [(c.mode, c.outcome) for c in report.calls] == [("standalone", "ok"), ("shorten", "failed")]
