"""Responses-API items ⇄ session events: every item comes back exactly, CJK text included."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import SecretStr

from projections.rows import restore_event_json, stored_event_json
from schemas import SessionEvent, SessionKey
from schemas.records import parse_event_record
from schemas.settings import LLMSettings
from streams.adapters.native import native_of
from streams.adapters.openai_agents_items import (
    ITEM_FORMAT,
    event_to_items,
    item_to_event,
    message_items,
    summary_item,
)
from streams.summarizer.openai_adapter import OpenAIChatModel
from streams.summarizer.summarizer import Summarizer
from tests.support.markers import MarkerBook, find_markers
from tests.support.openai_server import MarkerEcho, OpenAIServer

KEY = SessionKey("app", "u", "s")
AT = datetime(2026, 1, 1, tzinfo=UTC)
TEXT = st.text(alphabet=st.sampled_from(list("ab 1.\n北京天气很好。東京🙂é")), max_size=40)
IDS = st.text(alphabet="abcdef0123456789_", min_size=1, max_size=12)


def _wire(event: SessionEvent) -> SessionEvent:
    """Through the events topic (JSON) and the Cassandra row (content held in the text column)."""
    decoded = parse_event_record(event.model_dump_json(exclude_none=True).encode())
    assert isinstance(decoded, SessionEvent)
    return restore_event_json(stored_event_json(decoded), decoded.message.content or "")


def _convert(item: dict[str, Any]) -> SessionEvent:
    return item_to_event(item, KEY, event_id="e1", timestamp=AT, request_id="r1")


ITEMS = st.one_of(
    st.builds(lambda t: {"role": "user", "content": t}, TEXT),
    st.builds(lambda t: {"role": "user", "content": [{"type": "input_text", "text": t}]}, TEXT),
    st.builds(lambda i, t: {"id": i, "type": "message", "role": "assistant", "status": "completed",
                            "content": [{"type": "output_text", "text": t, "annotations": []}]}, IDS, TEXT),
    st.builds(lambda t, u: {"role": "assistant", "content": [{"type": "output_text", "text": t, "annotations": []},
                                                              {"type": "refusal", "refusal": u}]}, TEXT, TEXT),
    st.builds(lambda t: {"role": "developer", "content": t}, TEXT),
    st.builds(lambda i, c, t: {"type": "function_call", "id": i, "call_id": c, "name": "get_weather",
                               "arguments": json.dumps({"city": t}, ensure_ascii=False), "status": "completed"},
              IDS, IDS, TEXT),
    st.builds(lambda c, t: {"type": "function_call_output", "call_id": c, "output": t}, IDS, TEXT),
    st.builds(lambda c, t: {"type": "function_call_output", "call_id": c,
                            "output": [{"type": "input_text", "text": t}]}, IDS, TEXT),
    st.builds(lambda i, t: {"type": "reasoning", "id": i, "summary": [{"type": "summary_text", "text": t}],
                            "encrypted_content": "opaque=="}, IDS, TEXT),
    st.builds(lambda i: {"type": "web_search_call", "id": i, "status": "completed",
                         "action": {"type": "search", "query": "北京"}}, IDS),
    st.builds(lambda i, c, t: {"type": "custom_tool_call", "id": i, "call_id": c, "name": "grep", "input": t},
              IDS, IDS, TEXT),
    st.builds(lambda c, t: {"type": "custom_tool_call_output", "call_id": c, "output": t}, IDS, TEXT),
    st.builds(lambda i, t: {"type": "mcp_call", "id": i, "server_label": "地图", "name": "route",
                            "arguments": "{}", "output": t}, IDS, TEXT),
    st.builds(lambda i: {"type": "image_generation_call", "id": i, "status": "completed",
                         "result": "iVBORw0KGgo" * 100}, IDS),
    st.builds(lambda t: {"role": "user", "content": [{"type": "input_text", "text": t}, {
        "type": "input_image", "image_url": "data:image/png;base64," + "iVBORw0KGgo" * 40, "detail": "auto"}]}, TEXT),
    st.builds(lambda t: {"role": "user", "content": [{"type": "input_image", "image_url": f"https://x.test/{t}.png"}]},
              TEXT),
    st.builds(lambda c: {"type": "function_call_output", "call_id": c, "output": [
        {"type": "input_file", "filename": "报告.pdf", "file_data": "data:application/pdf;base64,JVBERi0x"}]}, IDS),
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(ITEMS)
def test_every_item_round_trips_through_the_wire_and_the_store(item: dict[str, Any]) -> None:
    assert event_to_items(_wire(_convert(item))) == [item]


def test_the_chat_message_is_what_distill_summarizes() -> None:
    call = _convert({"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city":"北京"}'})
    assert call.message.role == "assistant" and call.message.tool_calls[0].id == "c1"
    assert call.message.tool_calls[0].function.arguments == '{"city":"北京"}'
    out = _convert({"type": "function_call_output", "call_id": "c1", "output": "晴，25°C"})
    assert (out.message.role, out.message.tool_call_id, out.message.content) == ("tool", "c1", "晴，25°C")
    reasoning = _convert({"type": "reasoning", "id": "r", "summary": [{"type": "summary_text", "text": "想一想"}]})
    assert reasoning.message.reasoning_content == "想一想" and reasoning.message.content is None
    assert _convert({"role": "developer", "content": "be brief"}).message.role == "system"
    user = _convert({"role": "user", "content": [{"type": "input_text", "text": "你好"}]})
    assert (user.author, user.message.content) == ("user", "你好")


def test_the_text_is_stored_once() -> None:
    big = "结果 " * 5000
    event = _convert({"type": "function_call_output", "call_id": "c1", "output": big})
    assert event.model_dump_json().count("结果") == 5000


def test_a_compacted_text_replaces_the_output_and_nothing_else() -> None:
    event = _convert({"type": "function_call_output", "call_id": "c1", "output": "x" * 900})
    assert event_to_items(event, "[distill: elided]") == [
        {"type": "function_call_output", "call_id": "c1", "output": "[distill: elided]"}
    ]
    parts = _convert(
        {
            "type": "function_call_output",
            "call_id": "c1",
            "output": [{"type": "input_text", "text": "y"}, {"type": "input_text", "text": "z"}],
        }
    )
    assert event_to_items(parts, "[short]")[0]["output"] == "[short]"


def test_events_of_other_producers_become_items() -> None:
    event = SessionEvent.model_validate({
        "app_name": "app", "user_id": "u", "session_id": "s", "event_id": "x", "timestamp": AT, "author": "bot",
        "message": {"role": "assistant", "content": "两个调用", "tool_calls": [
            {"id": "a", "function": {"name": "f", "arguments": "{}"}},
            {"id": "b", "function": {"name": "g", "arguments": "{}"}}]},
    })  # fmt: skip
    assert event_to_items(event) == [
        {"role": "assistant", "content": "两个调用"},
        {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "b", "name": "g", "arguments": "{}"},
    ]
    assert message_items(event.message.model_copy(update={"role": "tool", "tool_call_id": "a"}), "ok") == [
        {"type": "function_call_output", "call_id": "a", "output": "ok"}
    ]
    assert summary_item("用户要去北京")["content"].endswith("用户要去北京")


def test_custom_tool_calls_pair_like_function_calls() -> None:
    call = _convert({"type": "custom_tool_call", "call_id": "c1", "name": "grep", "input": "TODO 待办"})
    assert [(c.id, c.function.name, c.function.arguments) for c in call.message.tool_calls] == [
        ("c1", "grep", "TODO 待办")]  # fmt: skip
    out = _convert({"type": "custom_tool_call_output", "call_id": "c1", "output": "3 处"})
    assert (out.message.role, out.message.tool_call_id, out.message.content) == ("tool", "c1", "3 处")
    assert event_to_items(out, "[distill: elided]")[0]["output"] == "[distill: elided]"


def test_inline_data_is_named_not_copied() -> None:
    image = _convert({"type": "image_generation_call", "id": "ig", "result": "iVBORw0KGgo" * 100})
    assert image.message.content == '[image_generation_call] {"result": "<1,100 characters of inline data>"}'
    shot = _convert({"type": "computer_call_output", "call_id": "c9",
                     "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64,AAAA"}})  # fmt: skip
    assert "base64" not in (shot.message.content or "") and "c9" in (shot.message.content or "")


async def test_hosted_and_custom_tool_items_are_in_the_summary_input() -> None:
    """Oracle: the items of hosted and built-in tools (an MCP call's output, file search results, the
    code the code interpreter ran, a shell's output) and of custom tools reach the next request as
    they are (``get_items``); a summary that covers them must hold them, or nothing does.

    Every item carries a marker; the scripted OpenAI-compatible server echoes the markers its request
    held: before the summary every item comes back, after it every marker is in the summary.
    """
    book = MarkerBook()
    items: list[dict[str, Any]] = [
        {"role": "user", "content": f"帮我查一下去机场的路线和航班{book.mint('ask')}"},
        {"type": "mcp_call", "id": "mcp1", "server_label": "地图", "name": "route", "arguments": '{"to": "PVG"}',
         "output": f"地铁2号线，约75分钟{book.mint('mcp')}", "status": "completed"},
        {"type": "file_search_call", "id": "fs1", "status": "completed", "queries": ["航班"],
         "results": [{"file_id": "f1", "filename": "行程.pdf", "text": f"MU5101 08:00 起飞{book.mint('fs')}"}]},
        {"type": "code_interpreter_call", "id": "ci1", "status": "completed", "container_id": "cn1",
         "code": f"print(75 + 90)  # {book.mint('code')}", "outputs": [{"type": "logs", "logs": "165"}]},
        {"type": "custom_tool_call", "id": "ct1", "call_id": "c1", "name": "grep",
         "input": f"MU5101 {book.mint('in')}"},
        {"type": "custom_tool_call_output", "call_id": "c1", "output": f"找到 1 处{book.mint('out')}"},
        {"type": "local_shell_call_output", "id": "ls1", "output": f"terminal 2{book.mint('shell')}"},
        {"role": "assistant", "content": f"请 05:45 前出发。{book.mint('answer')}"},
    ]  # fmt: skip
    events = [item_to_event(item, KEY, event_id=f"e{n}", timestamp=AT.replace(second=n), request_id="r1")
              for n, item in enumerate(items)]  # fmt: skip
    assert [i for e in events for i in event_to_items(_wire(e))] == items  # the view, before any summary

    with OpenAIServer(default=MarkerEcho()) as server:
        model = OpenAIChatModel(LLMSettings(base_url=server.base_url, api_key=SecretStr("k"), model="m",
                                            context_window=64_000))  # fmt: skip
        result = await Summarizer(model).summarize("", events, session=KEY)
    assert result.last_event is not None and result.last_event.event_id == events[-1].event_id
    lost = sorted(name for name, ms in book.by_event.items() if not set(ms) <= set(find_markers(result.text)))
    assert not lost, f"items {lost} are neither in the summary nor in the view once the summary covers them"


PNG = "data:image/png;base64," + "iVBORw0KGgoAAAANSUhEUg" * 60


def test_images_and_files_are_named_in_the_text_never_copied() -> None:
    """An image, file or audio part is in the event's text (kind, type, size, name, URL or file id), its data not."""
    image = {"type": "input_image", "image_url": PNG, "detail": "auto"}
    user = _convert({"role": "user", "content": [{"type": "input_text", "text": "这张收据的金额是多少？"}, image]})
    assert user.message.content == "这张收据的金额是多少？[image: image/png, 990 bytes]"
    only = _convert({"role": "user", "content": [{"type": "input_image", "file_id": "file-9", "image_url": None}]})
    assert only.message.content == "[image: file_id=file-9]"
    url = _convert({"role": "user", "content": [{"type": "input_image", "image_url": "https://x.test/票.jpg"}]})
    assert url.message.content == "[image: https://x.test/票.jpg]"
    file = {"type": "input_file", "filename": "报告.pdf", "file_data": "data:application/pdf;base64,JVBERi0xLjQK"}
    pdf = _convert({"type": "function_call_output", "call_id": "c1", "output": [file]})
    assert pdf.message.content == "[file: application/pdf, 9 bytes, 报告.pdf]"
    audio = _convert({"role": "user", "content": [{"type": "input_audio",
                                                   "input_audio": {"data": "UklGRg==", "format": "wav"}}]})  # fmt: skip
    assert audio.message.content == "[audio: audio/wav, 4 bytes]"
    raw = "iVBORw0KGgoAAAANSUhEUg" * 60  # base64 without a data URI's header: inline data all the same
    bare = _convert({"role": "user", "content": [{"type": "input_image", "image_url": raw}]})
    assert bare.message.content == "[image: 990 bytes]"
    assert "iVBOR" not in user.model_dump_json(exclude={"native"})  # the data is in the native item only
    assert "iVBOR" not in bare.model_dump_json(exclude={"native"})
    for event in (user, only, url, pdf, audio, bare):  # the item comes back whole, its data included
        assert event_to_items(_wire(event)) == [native_of(event, ITEM_FORMAT)["record"]]  # type: ignore[index]


async def test_an_image_or_file_the_model_saw_is_in_the_summary_input() -> None:
    """Oracle: an attachment's name (and, for a URL, the URL) reaches the summary; its markers survive it."""
    book = MarkerBook()
    items: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "input_text", "text": f"看看这张收据{book.mint('ask')}"},
                                     {"type": "input_image", "image_url": f"https://x.test/{book.mint('img')}.png"}]},
        {"role": "user", "content": [{"type": "input_file", "filename": f"合同{book.mint('file')}.pdf",
                                      "file_data": "data:application/pdf;base64," + "JVBERi0x" * 200}]},
        {"role": "user", "content": [{"type": "input_image", "file_id": f"file-{book.mint('fid')}"}]},
        {"role": "assistant", "content": f"金额是 165 元。{book.mint('answer')}"},
    ]  # fmt: skip
    events = [item_to_event(item, KEY, event_id=f"e{n}", timestamp=AT.replace(second=n), request_id="r1")
              for n, item in enumerate(items)]  # fmt: skip
    assert [i for e in events for i in event_to_items(_wire(e))] == items
    with OpenAIServer(default=MarkerEcho()) as server:
        model = OpenAIChatModel(LLMSettings(base_url=server.base_url, api_key=SecretStr("k"), model="m",
                                            context_window=64_000))  # fmt: skip
        result = await Summarizer(model).summarize("", events, session=KEY)
        sent = "\n".join(r.text() for r in server.requests)
    lost = sorted(name for name, ms in book.by_event.items() if not set(ms) <= set(find_markers(result.text)))
    assert not lost, f"attachments {lost} are in no summary once it covers their events"
    assert "JVBERi0x" not in sent, "inline data is never sent in the summary input"
