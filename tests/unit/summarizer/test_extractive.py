import itertools
import json
import re

import pytest

from streams.context.injection import default_system_format
from streams.rules.tokens import SimpleTokenCounter
from streams.summarizer.extractive import EXTRACTIVE_MODEL_NAME, ExtractiveModel, summarize_extractive
from streams.summarizer.fork import fork_request
from streams.summarizer.summarizer import Summarizer

from .helpers import SESSION, event, markers, request_messages

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


def _word_tokens(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def test_never_invents_text() -> None:
    text = summarize_extractive(CONVERSATION, max_words=200)
    assert _word_tokens(text) <= _word_tokens(CONVERSATION) | {"called"}


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


TOOLS = "\n".join(
    [
        "user: Find the Sintra trains on 2026-05-14 after noon, we must be back by 19:00.",
        'planner: [Called tool: check_train with args: {"from": "Rossio", "to": "Sintra", "date": "2026-05-14"}]',
        'planner: [Called tool: weather_forecast with args: {"city": "Sintra"}]',
        'planner: [check_train returned: {"departures": ["12:11", "12:41"], "duration_min": 40, "status": "ok"}]',
        'planner: [weather_forecast returned: {"daily": [{"day": "05-14", "max_c": 17, "rain_pct": 60}]}]',
        "planner: Take the first train; pack rain jackets.",
    ]
)


def test_folds_a_call_and_its_result_into_one_outcome_line() -> None:
    text = summarize_extractive(TOOLS, max_words=200)
    assert "planner: check_train(from=Rossio, to=Sintra, date=2026-05-14) → departures=12:11,12:41" in text
    assert "duration_min=40, status=ok" in text
    assert "weather_forecast(city=Sintra) → daily=[day=05-14, max_c=17, rain_pct=60]" in text
    assert "called" not in text and "returned" not in text and "{" not in text
    assert _word_tokens(text) <= _word_tokens(TOOLS)


def test_a_call_without_its_result_stays_as_a_called_line_and_a_long_result_is_clipped() -> None:
    long_result = json.dumps({"items": [{"id": f"item-{i}", "size": i} for i in range(50)]})
    conversation = "\n".join(
        [
            'agent: [Called tool: deploy with args: {"version": "v2.3.1"}]',
            f"agent: [list_items returned: {long_result}]",
        ]
    )
    text = summarize_extractive(conversation, max_words=200)
    assert "agent: called deploy(version=v2.3.1)" in text
    outcome = next(line for line in text.splitlines() if "list_items" in line)
    assert outcome.startswith("agent: list_items → items=[id=item-0, size=0;") and outcome.endswith("…")
    assert len(outcome.split()) <= 25


def test_a_multi_line_tool_result_stays_one_outcome() -> None:
    conversation = "\n".join(
        [
            'agent: [Called tool: web_search with args: {"query": "vegan Alfama"}]',
            "agent: [web_search returned: Result 0: Ao 26, Rua Vitor Cordon 12.",
            "Result 1: Princesa do Castelo, Rua do Salvador 64.]",
        ]
    )
    text = summarize_extractive(conversation, max_words=200)
    assert text.splitlines() == [
        "agent: web_search(query=vegan Alfama) → Result 0: Ao 26, Rua Vitor Cordon 12. Result 1: Princesa do"
        " Castelo, Rua do Salvador 64."
    ]


RECALL = "\n".join(
    [
        "user: Which hotel did we book last week? Budget is 900 EUR.",
        'agent: [Called tool: session_search with args: {"query": "hotel booking"}]',
        'agent: [session_search returned: {"hits": [{"event_id": "ev-9", "text": "Booked Hotel Zeta HZ-77"}]}]',
        'agent: [Called tool: session_load with args: {"event_id": "ev-9"}]',
        'agent: [session_load returned: {"text": "Hotel Zeta confirmed HZ-77"}]',
        'agent: [Called tool: history_lookup with args: {"id": "ev-3"}]',
        'agent: [history_lookup returned: {"historical_context": true, "text": "Old plan OLD-123"}]',
        'agent: [Called tool: get_rate with args: {"pair": "EUR/USD"}]',
        'agent: [get_rate returned: {"rate": 1.08}]',
        "agent: You booked Hotel Alfa.",
    ]
)


def test_recall_tool_traffic_never_reaches_the_summary() -> None:
    text = summarize_extractive(RECALL, max_words=200)
    for needle in ("session_search", "session_load", "history_lookup", "HZ-77", "Zeta", "OLD-123", "historical"):
        assert needle not in text
    assert "get_rate(pair=EUR/USD) → rate=1.08" in text
    assert "Budget is 900 EUR" in text


def test_recall_lines_of_an_older_previous_summary_are_dropped() -> None:
    previous = "\n".join(
        [
            "user: budget is 900 EUR.",
            'agent: session_search returned: {"hits": [{"text": "Hotel Zeta HZ-77"}]}',
            'agent: called session_load with {"event_id": "ev-9"}',
            'agent: lookup returned: {"historical_context": true, "text": "OLD-123"}',
            'agent: search_flights returned: {"flight": "TP1350", "price_eur": 412}',
        ]
    )
    text = summarize_extractive("user: Please book TP1350 now.", previous, max_words=200)
    assert "HZ-77" not in text and "session_load" not in text and "OLD-123" not in text
    assert "agent: search_flights → flight=TP1350, price_eur=412" in text
    assert text.startswith("user: budget is 900 EUR.")


def test_near_identical_lines_are_kept_once() -> None:
    conversation = "\n".join(
        [
            "user: The deadline is Friday 2026-05-15 for invoice INV-42.",
            "assistant: The deadline is Friday 2026-05-15 for invoice INV-42!",
            "user: the deadline is friday 2026-05-15 for invoice inv-42",
        ]
    )
    text = summarize_extractive(conversation, "user: The deadline is Friday 2026-05-15 for invoice INV-42.")
    assert text == "user: The deadline is Friday 2026-05-15 for invoice INV-42."


def test_agent_narration_gives_way_to_conclusions() -> None:
    conversation = "\n".join(
        [
            "user: Book a table for 2 at Arkhe on May 14.",
            "agent: Great, let me check availability for you.",
            "agent: Reserved Arkhe for May 14 at 20:00 (ref ARK-0514-2).",
        ]
    )
    text = summarize_extractive(conversation, max_words=200)
    assert "let me check" not in text
    assert "ARK-0514-2" in text


def _demo_chunks() -> list[str]:
    from streams.app.decoding import decode_event_record
    from streams.cli.demo_cmd import load_demo_session
    from streams.summarizer.conversation import DEFAULT_FORMATTER

    events = [decode_event_record(json.dumps(r).encode(), 1 << 30) for r in load_demo_session("demo")]
    cuts = [0, 19, 30, 38, len(events)]
    return [DEFAULT_FORMATTER.conversation_text(events[a:b]) for a, b in itertools.pairwise(cuts)]


@pytest.mark.parametrize("limit", [None, 60, 120])
def test_demo_session_summaries_honour_the_word_limit_and_roll_forward(limit: int | None) -> None:
    previous = ""
    for chunk in _demo_chunks():
        summary = summarize_extractive(chunk, previous, max_words=limit)
        assert 0 < len(summary.split()) <= (limit or 200)
        assert "returned:" not in summary and "[Called tool" not in summary
        assert '{"' not in summary
        previous = summary
    if limit is None:
        # the user's goal survives every round; later facts arrive
        assert "Budget is 2500 EUR" in previous
        assert "ana.silva@example.com" in previous
        assert "pack light rain jackets" in previous


async def test_a_forked_extractive_pass_rolls_the_previous_summary_forward() -> None:
    previous = "user: 部署必须使用集群 P1，预算上限 400 美元。\nuser: 数据库只能放在区域 P2。"
    delta = [
        event(1, "user", "请在周五之前轮换密钥 M1。"),
        event(2, "agent", "我决定周四轮换密钥 M1，并把日志存到 M2 桶。"),
    ]
    system = "你是部署助手。\n\n" + default_system_format(previous)
    parent = {"messages": [{"role": "system", "content": system}, *request_messages(delta)]}
    s = Summarizer(ExtractiveModel(), token_counter=SimpleTokenCounter())
    forked = await s.summarize(previous, delta, session=SESSION, model_request=parent)
    standalone = await s.summarize(previous, delta, session=SESSION)
    assert forked.fork_used and forked.report.calls[0].mode == "cache_safe_fork"
    assert set(markers(forked.text)) == {"P1", "P2", "M1", "M2"}
    assert forked.text == standalone.text
    assert "部署助手" not in forked.text


# --- CJK text and max_summary_length ------------------------------------------------------------

CHINESE = "\n".join(
    [
        "user: 我们决定下周五之前把夜间导出任务迁移到新的存储桶。",
        "user: 所有文件必须使用客户管理的密钥加密，不能使用默认密钥。",
        "assistant: 好的。我先检查一下当前任务的权限配置，然后再给出迁移步骤。",
        "user: 另外预算有限，请尽量不要增加新的计算资源，谢谢。",
    ]
    * 6
)


def test_a_word_limit_bounds_chinese_text_too() -> None:
    # Chinese has no spaces: counted by whitespace, the whole conversation was a few "words".
    text = summarize_extractive(CHINESE, max_words=40)
    assert 0 < sum(1 for c in text if "\u4e00" <= c <= "\u9fff") <= 40


def test_a_chinese_decision_without_digits_is_kept_beside_a_previous_summary() -> None:
    # Each sentence was one "word", so scored as chatter (too short) and left out whenever a
    # previous summary existed: the new rounds of a Chinese session reached no summary.
    text = summarize_extractive("user: 我们决定改用北京的机房部署，并且必须在月底前完成。", "user: 旧的事实 42。")
    assert "北京的机房" in text and "旧的事实" in text


def test_chinese_sentences_of_one_line_are_joined_as_written() -> None:
    text = summarize_extractive("user: 预算是五千元。请在周五前完成迁移。", max_words=200)
    assert text == "user: 预算是五千元。请在周五前完成迁移。"


async def test_the_extractive_model_fits_max_summary_length_by_selection_not_by_a_cut() -> None:
    cap = 75  # the uncapped summary has three lines, ~100 characters
    s = Summarizer(ExtractiveModel(), max_summary_length=cap, max_summary_words=None)
    lines = [line.partition(": ") for line in CHINESE.splitlines()]
    events = [event(i, "user" if who == "user" else "agent", text) for i, (who, _, text) in enumerate(lines)]
    result = await s.summarize("", events)
    assert result.report.length_cut is None, "the embedded model wrote past the cap it was given"
    assert 0 < len(result.text) <= cap
    sources = CHINESE.replace("user: ", "").replace("assistant: ", "")
    assert all(line.partition(": ")[2] in sources for line in result.text.splitlines()), "a line was cut"
    assert len(result.text.splitlines()) == 2, "the cap left room for two whole lines"


def test_korean_words_are_counted_by_their_spaces() -> None:
    from streams.summarizer.extractive_tools import word_count

    assert word_count("안녕하세요 여러분 반갑습니다") == 3  # Korean spaces its words
    assert word_count("预算五千 budget 予算") == 7


def test_a_line_over_the_character_cap_is_cut_on_a_character_boundary() -> None:
    # The one line is longer than max_summary_length: cut by the cap's own rule (never inside an emoji sequence).
    text = summarize_extractive("user: " + "好👍🏽" * 40, max_words=200, max_chars=30)
    assert 0 < len(text) <= 30 and text.endswith("…")
    assert "👍…" not in text, "the cut split a skin-tone sequence"
