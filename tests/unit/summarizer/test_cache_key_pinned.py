"""The cache address of fixed inputs does not move when the request building is made faster.

The content-addressed cache is filled from the ``distill-input-hash`` headers the
live worker wrote: a change of address for the same request would make every
cached summary miss (a replay after an upgrade would call the model for all of
them). These digests were computed before the request build was optimised (one
build of the whole-delta request in ``plan_pass``, memoized prompt placeholders);
a change that alters what is sent must change them (the last test checks it can).
"""

from __future__ import annotations

from schemas import SessionEvent
from schemas.settings import Settings
from streams.summarizer import build_summarizer
from streams.summarizer.summarizer import Summarizer
from tests.unit.summarizer.helpers import SESSION, ScriptedModel, event

PREVIOUS = "之前的摘要：用户在调试部署脚本。"


def _events() -> list[SessionEvent]:
    return [
        event(0, "user", "请帮我检查这个部署脚本为什么失败"),
        event(1, "agent", "我先运行一下测试", tool_calls=[("c1", "run_tests", '{"path": "tests/单元"}')]),
        event(2, "tool", "失败日志：" + "错误行 " * 3000 + "结束", tool_call_id="c1", name="run_tests"),
        event(3, "agent", "原因是配置文件里少了一个字段，已经修好了"),
        event(4, "user", "谢谢，再总结一下"),
    ]


def _summarizer(settings: Settings | None = None) -> Summarizer:
    model = ScriptedModel(default="x", context_window=100_000)
    built = build_summarizer(settings or Settings(), app_name=SESSION.app_name, model=model)
    assert isinstance(built, Summarizer)
    return built


def test_the_address_of_fixed_inputs_is_the_one_computed_before_the_optimisation() -> None:
    s, events = _summarizer(), _events()
    assert s.cache_key("", events) == "6cab58efec487fd290be2b244f6d88bd26bd6ba02131ffcfe5458e78aa94c465"
    assert s.cache_key(PREVIOUS, events) == "8c61eb81f64df5c1a140c0722f4013df87c96527b41b3b763859727ed9b45370"
    assert s.cache_key("", events[:2], force=True) == "1a8db2b0603f9f5d9104570da200b55dbf1c04b7a41bd4e280b41e32b7bbdd22"


def test_the_address_of_a_request_cut_to_its_budget_is_unchanged_too() -> None:
    s, events = _summarizer(), _events()
    request = s._first_request(PREVIOUS, events, 4000, None)
    sent = "\n".join(str(m.get("content") or "") for m in request.messages)
    assert 0 < sent.count("错误行") < 3000, "the tool result must be cut head + tail in this request"
    assert s.cache_key(PREVIOUS, events, context_window=4000) == (
        "5f70b4111500cbffdc3e8d1447c0a055332630c3e0482fbebc70629d118e3ba1"
    )


def test_a_changed_request_changes_the_pinned_address() -> None:
    # The pins are not blind: one more character in a CJK payload, or another prompt, moves the address.
    events = _events()
    edited = [*events[:3], events[3].model_copy(update={"message": events[3].message.model_copy(
        update={"content": f"{events[3].message.content}。"})}), events[4]]  # fmt: skip
    base = _summarizer().cache_key(PREVIOUS, events)
    assert _summarizer().cache_key(PREVIOUS, edited) != base
    prompt = Settings.model_validate({"summary": {"prompt": "请用要点总结：{conversation_text}"}})
    assert _summarizer(prompt).cache_key(PREVIOUS, events) != base
