"""The marker oracle and the fault-injecting echo model (test support the oracle tests rely on)."""

from __future__ import annotations

from typing import Any

from tests.support.markers import MarkerBook, find_cut_event_ids, find_markers, judge_key
from tests.support.openai_server import CHINESE_CAPPED, FaultMix, MarkerEcho, model_tokens


def _body(text: str) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": text}]}


def test_markers_are_found_glued_to_cjk_and_deduplicated() -> None:
    book = MarkerBook()
    a, b = book.mint("s-e1"), book.mint("s-e1")
    c = book.mint("s-e2")
    assert len({a, b, c}) == 3 and book.markers_of("s-e1") == [a, b]
    assert book.by_marker[c] == "s-e2"
    assert find_markers(f"用户{a}了，{c}。{a}") == [a, c]
    assert find_cut_event_ids('[… 9 chars left out; session_load(event_id="s-e7") returns it whole …]') == {"s-e7"}


def test_a_verdict_names_every_missing_marker_and_accepts_a_named_cut() -> None:
    book = MarkerBook()
    events = [f"s-e{i}" for i in range(1, 5)]
    marks = {e: book.mint(e) for e in events}
    middle = book.mint("s-e2")
    summary = f"{marks['s-e1']} {marks['s-e2']}"
    verdict = judge_key(book, ("s", ""), events, summary, "s-e3", 2)
    assert verdict.missing == {"s-e2": [middle], "s-e3": [marks["s-e3"]]}
    assert verdict.behind and not verdict.ok
    cut = judge_key(book, ("s", ""), events, summary + " " + marks["s-e3"], "s-e4", 3, {"s-e2", "s-e4"})
    assert cut.missing == {} and cut.cut_accounted == 2 and cut.ok
    never = judge_key(book, ("s", ""), events, None, None, None)
    assert set(never.missing) == set(events) and "behind" in never.describe()


def test_the_echo_carries_markers_and_cuts_forward() -> None:
    echo = MarkerEcho(FaultMix(server_error=0, rate_limited=0, empty=0, slow=0))
    reply = echo(_body('old MK0123456789abcd new MKaaaaaaaaaa cut session_load(event_id="s-e9")'))
    assert reply.status == 200 and reply.text is not None
    assert find_markers(reply.text) == ["MK0123456789", "MKaaaaaaaaaa"]
    assert find_cut_event_ids(reply.text) == {"s-e9"}


def test_faults_depend_on_the_seed_and_the_content_not_on_the_arrival_order() -> None:
    mix = FaultMix(server_error=0.3, rate_limited=0.2, empty=0.1, slow=0.2)
    bodies = [_body(f"request {i} MK{i:010x}") for i in range(60)]

    def outcomes(echo: MarkerEcho, order: list[int]) -> dict[int, list[tuple[int, bool, float]]]:
        out: dict[int, list[tuple[int, bool, float]]] = {}
        for i in order:
            r = echo(bodies[i])
            out.setdefault(i, []).append((r.status, bool(r.text), r.delay_s))
        return out

    order = [i for i in range(60) for _ in range(3)]
    first = outcomes(MarkerEcho(mix, seed=7), order)
    assert outcomes(MarkerEcho(mix, seed=7), list(reversed(order))) == first
    assert outcomes(MarkerEcho(mix, seed=8), order) != first
    statuses = [s for calls in first.values() for s, _, _ in calls]
    assert {500, 429, 200} <= set(statuses)
    assert any(s == 200 and not text for calls in first.values() for s, text, _ in calls)  # empty answers


def test_context_window_counts_cjk_as_a_real_tokenizer_and_down_refuses_everything() -> None:
    assert model_tokens("abcd" * 10) == 10 and model_tokens("用户" * 10) == 20
    echo = MarkerEcho(FaultMix(server_error=0, rate_limited=0, empty=0, slow=0, context_window=100))
    assert echo(_body("a" * 300)).status == 200
    refused = echo(_body("用" * 300))
    assert refused.status == 400 and refused.body is not None
    assert refused.body["error"]["code"] == "context_length_exceeded"
    echo.down = True
    assert echo(_body("a")).status == 500 and echo.faults["down"] == 1


def test_the_chinese_style_writes_no_space_and_runs_past_the_cap_with_the_markers_first() -> None:
    echo = MarkerEcho(FaultMix(server_error=0, rate_limited=0, empty=0, slow=0), styles=(CHINESE_CAPPED,))
    reply = echo(_body("请总结以下对话\n用户MK0000000001了，助手MK0000000002。"))
    text = reply.text or ""
    assert " " not in text and len(text) >= 720
    assert text.startswith("对话摘要：MK0000000001、MK0000000002。")
