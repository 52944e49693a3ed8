"""The facade fits Chinese, Japanese and Korean requests into the window for real.

At 4 characters a token a CJK text counts 3-4x fewer tokens than a BPE
tokenizer finds, so a request that "fits" overflows the model's window. The
oracle is the real tokenizer (o200k, offline): the fitted request is within
the budget by its count, and every event's marker is in it unless the fitting
says a summary is needed first (the facade then forces one).
"""

from __future__ import annotations

import pytest

from schemas import SessionEvent
from schemas.settings import AgentSettings
from streams.agent.options import assembly_options
from streams.context import assemble
from streams.context.fitting import fit
from streams.rules.tokens import (
    ScriptAwareTokenCounter,
    SimpleTokenCounter,
    TiktokenCounter,
    get_token_counter,
)
from tests.unit.context.oracle import marker, unaccounted
from tests.unit.context.sessions import Session

REAL = TiktokenCounter("gpt-4o")
TEXTS = {
    "zh": "我们讨论了明天去杭州的行程安排，包括高铁车次、酒店预订和西湖附近的餐厅推荐。",
    "ja": "明日は京都へ行く予定で、新幹線の時間とホテルの予約を確認しました。",
    "ko": "내일 부산에 가는 일정과 기차 시간, 호텔 예약을 확인했습니다.",
}


def _session(text: str, rounds: int, repeat: int) -> list[SessionEvent]:
    s = Session()
    for r in range(rounds):
        s.turn(f"r{r}").user(f"{marker(2 * r + 1)} " + text * repeat)
        s.answer(f"{marker(2 * r + 2)} " + text * repeat)
    return s.events


def _real_tokens(messages: list[dict[str, object]]) -> int:
    return sum(REAL.count_text(str(m["content"] or "")) + 4 for m in messages)


@pytest.mark.parametrize("lang", sorted(TEXTS))
def test_the_estimate_is_never_below_the_tokenizer_for_wide_scripts(lang: str) -> None:
    counter = ScriptAwareTokenCounter()
    for n in (1, 3, 40):
        assert counter.count_text(TEXTS[lang] * n) >= REAL.count_text(TEXTS[lang] * n)
    english = "the itinerary covers trains, hotels and restaurants near the lake " * 5
    assert counter.count_text(english) == SimpleTokenCounter().count_text(english)


@pytest.mark.parametrize("lang", sorted(TEXTS))
@pytest.mark.parametrize(("rounds", "repeat"), [(3, 4), (20, 12)], ids=["fits", "too-long"])
def test_a_fitted_request_is_within_the_window_by_the_tokenizer(lang: str, rounds: int, repeat: int) -> None:
    events = _session(TEXTS[lang], rounds, repeat)
    opts = assembly_options(AgentSettings(), filter_key="", model="my-local-model")  # window 8192
    assert opts.token_budget is not None
    fitted = fit(lambda o: assemble("你是旅行助手。", None, events, None, (), o), opts)
    assert _real_tokens(fitted.request.messages) <= opts.token_budget
    missing = unaccounted(fitted.request.messages, events)
    assert missing == [] or fitted.needs_summary, missing
    if rounds == 3:
        assert missing == [] and not fitted.needs_summary


def test_the_counter_setting_leaves_the_workers_counter_alone() -> None:
    before = get_token_counter()
    exact = assembly_options(AgentSettings(token_counter="tiktoken"), filter_key="", model="gpt-4o")
    assert isinstance(exact.token_counter, TiktokenCounter) and exact.token_counter.encoding_name == "o200k_base"
    simple = assembly_options(AgentSettings(token_counter="simple"), filter_key="", model=None)
    assert isinstance(simple.token_counter, SimpleTokenCounter)
    assert get_token_counter() is before
