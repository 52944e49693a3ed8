"""Tool-call ids reused across turns (``call_0`` again in every turn): a result answers its own turn's call.

The full history's rule (``streams.context.pairing.pair_results``) and the read side's restatement of it
over ``tool_call_events`` rows (``projections.context_read.pair_rows``) must agree, or the request built
from the read differs from the one built from the full history
(``tests/integration/test_context_read_property.py`` checks that against Cassandra).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from projections.context_read import pair_rows
from schemas import Message
from streams.context import AssemblyOptions, assemble
from streams.context.items import HistoryItem
from streams.context.pairing import LEFT_OUT_MARK, pair_results, repair_pairing
from tests.unit.context.sessions import Session, summary_at

ON = AssemblyOptions(add_session_summary=True)


def _call(call_id: str) -> Message:
    return Message.model_validate(
        {"role": "assistant", "tool_calls": [{"id": call_id, "type": "function", "function": {"name": "f"}}]}
    )


def _result(call_id: str) -> Message:
    return Message(role="tool", tool_call_id=call_id, content=f"result of {call_id}")


def test_a_late_result_answers_its_own_turns_call_not_a_later_answered_one() -> None:
    """Turn 1's ``call_0`` is still running when turn 2 reuses the id, gets its result, and a summary
    covers both; turn 1's result then arrives. It is shown with turn 1's call (before: turn 2's call was
    brought back for it, showing turn 1's result as turn 2's answer)."""
    s = Session()
    s.turn("r1").user("weather in Paris? 巴黎")
    s.call(("call_0", "weather", '{"city": "Paris"}'))
    s.answer("still looking")
    s.turn("r2").user("and Rome? 罗马")
    s.call(("call_0", "weather", '{"city": "Rome"}'))
    rome_result = s.result("call_0", "Rome: sunny")
    s.answer("Rome is sunny")
    s.result("call_0", "Paris: rain (late) 迟到", request_id="r1", invocation_id="inv-r1")
    request = assemble("sys", summary_at(rome_result), s.events, None, (), ON)
    pairs = [(m["tool_calls"][0]["function"]["arguments"], n.get("content"))
             for m, n in zip(request.messages, request.messages[1:], strict=False) if m.get("tool_calls")]  # fmt: skip
    # Rome's round is the resume tail of the current turn: it comes back as well, with its own result.
    assert pairs == [('{"city": "Paris"}', "Paris: rain (late) 迟到"), ('{"city": "Rome"}', "Rome: sunny")]
    assert LEFT_OUT_MARK not in json.dumps(request.messages, ensure_ascii=False)


def test_repair_pairs_a_result_with_the_nearest_unanswered_call() -> None:
    """Two calls with one id, the later answered first: the other result goes to the earlier call, not
    over the later call's result (before: it replaced it, and the earlier call was left out)."""
    items = [
        HistoryItem(_call("call_0"), "a"),
        HistoryItem(_call("call_0"), "b"),
        HistoryItem(_result("call_0"), "rb"),
        HistoryItem(_result("call_0"), "ra"),
    ]
    out, report = repair_pairing(items)
    assert [i.event_id for i in out] == ["a", "ra", "b", "rb"]
    assert report.left_out == [] and report.replaced_results == []


def test_a_second_result_with_every_call_answered_replaces_the_latest() -> None:
    """An interim result, then the final one: it replaces the interim one in its call's place."""
    items = [HistoryItem(_call("call_0"), "a"), HistoryItem(_result("call_0"), "r1"),
             HistoryItem(_result("call_0"), "r2")]  # fmt: skip
    out, report = repair_pairing(items)
    assert [i.event_id for i in out] == ["a", "r2"] and len(report.replaced_results) == 1
    assert pair_results([i.message for i in items]) == {1: 0, 2: 0}


@dataclass(frozen=True)
class _Row:
    """A ``tool_call_events`` row as the read sees it."""

    tool_call_id: str
    seq: int
    event_id: str
    role: str
    tool_name: str


def test_the_read_sides_pairing_restates_the_full_historys() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        messages: list[Message | None] = []
        rows: list[_Row] = []
        for seq in range(rng.randint(1, 14)):
            call_id = rng.choice(("call_0", "call_1"))
            draw = rng.random()
            if draw < 0.45:
                messages.append(_call(call_id))
                rows.append(_Row(call_id, seq, f"e{seq}", "assistant", "f"))
            elif draw < 0.9:
                messages.append(_result(call_id))
                rows.append(_Row(call_id, seq, f"e{seq}", "tool", ""))
            else:
                messages.append(None)  # an event with no tool call (a user turn, an answer)
        rng.shuffle(rows)  # the read's rows come clustered by id, not in log order
        expected = {f"e{r}": f"e{c}" for r, c in pair_results(messages).items()}
        assert {r: c.event_id for r, c in pair_rows(rows).items()} == expected, messages


def test_a_result_after_turns_answered_out_of_order_replaces_the_latest_calls() -> None:
    """Turn 2's call answered first, then turn 1's, then one more result: it replaces the result of the id's
    latest call (turn 2's), as pair_results says — not of the call answered last (before: it went under
    turn 1's call, showing turn 2's final result as turn 1's answer)."""
    items = [HistoryItem(_call("x"), "a1"), HistoryItem(_call("x"), "a2"), HistoryItem(_result("x"), "ra"),
             HistoryItem(_result("x"), "rb"), HistoryItem(_result("x"), "rc")]  # fmt: skip
    assert pair_results([i.message for i in items]) == {2: 1, 3: 0, 4: 1}
    out, report = repair_pairing(items)
    assert [i.event_id for i in out] == ["a1", "rb", "a2", "rc"]
    assert [(r.event_id, r.by_event_id) for r in report.replaced_results] == [("ra", "rc")]


def test_repair_places_every_result_where_pair_results_pairs_it() -> None:
    """Random calls and results over two reused ids: each result the repair keeps follows the call
    pair_results names, and a result it replaces was paired with that same call."""
    rng = random.Random(11)
    for _ in range(3000):
        items: list[HistoryItem] = []
        for n in range(rng.randint(1, 12)):
            call_id = rng.choice(("call_0", "call_1"))
            items.append(HistoryItem(_call(call_id) if rng.random() < 0.5 else _result(call_id), f"e{n}"))
        pairs = {f"e{r}": f"e{c}" for r, c in pair_results([i.message for i in items]).items()}
        out, report = repair_pairing(items)
        owner = ""
        for item in out:
            if item.message.role == "assistant":
                owner = item.event_id or ""
            else:
                assert pairs[item.event_id or ""] == owner, [i.event_id for i in items]
        for replaced in report.replaced_results:
            assert pairs[replaced.event_id or ""] == pairs[replaced.by_event_id or ""]
