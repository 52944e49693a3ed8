"""trpc Events ⇄ session events: every event comes back exactly (CJK text, calls, responses, flags)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import SecretStr

from projections.rows import restore_event_json, stored_event_json
from schemas import SessionEvent, SessionKey
from schemas.records import parse_event_record
from schemas.settings import LLMSettings
from streams.adapters.native import Clock
from streams.summarizer.openai_adapter import OpenAIChatModel
from streams.summarizer.summarizer import Summarizer
from tests.support.markers import MarkerBook, find_markers
from tests.support.openai_server import MarkerEcho, OpenAIServer, request_text

trpc = pytest.importorskip("trpc_agent_sdk.events", exc_type=ImportError)
from trpc_agent_sdk.events import Event  # noqa: E402
from trpc_agent_sdk.types import (  # noqa: E402
    Blob,
    Content,
    EventActions,
    FunctionCall,
    FunctionResponse,
    GenerateContentResponseUsageMetadata,
    Part,
)

from streams.adapters.trpc_events import from_message, state_of, to_session_events, to_trpc_events  # noqa: E402

KEY = SessionKey("app", "u", "s")
TEXT = st.text(alphabet=st.sampled_from(list("ab 1.\n北京天气很好。東京🙂é")), max_size=30)
IDS = st.text(alphabet="abcdef0123456789_", min_size=1, max_size=10)
ARGS = st.dictionaries(st.sampled_from(["city", "城市", "n"]), st.one_of(TEXT, st.integers(-5, 5)), max_size=3)

PARTS = st.one_of(
    st.builds(lambda t: Part.from_text(text=t), TEXT),
    st.builds(lambda t: Part(text=t, thought=True), TEXT),
    st.builds(lambda i, a: Part(function_call=FunctionCall(id=i, name="get_weather", args=a)), st.none() | IDS, ARGS),
    st.builds(lambda i, a: Part(function_response=FunctionResponse(id=i, name="get_weather", response=a)),
              st.none() | IDS, ARGS),
    st.builds(lambda c: Part.from_executable_code(code=c, language="PYTHON"), TEXT),
    st.builds(lambda o: Part.from_code_execution_result(outcome="OUTCOME_OK", output=o), TEXT),
    st.builds(lambda b: Part.from_bytes(data=b, mime_type="image/png"), st.binary(max_size=64)),
    st.builds(lambda t: Part.from_uri(file_uri=f"gs://桶/{t}.pdf", mime_type="application/pdf"), TEXT),
)  # fmt: skip


@st.composite
def events(draw: st.DrawFn) -> Event:
    parts = draw(st.lists(PARTS, max_size=4))
    author = draw(st.sampled_from(["user", "travel_agent", "子代理"]))
    content = Content(role="user" if author == "user" else "model", parts=parts) if draw(st.booleans()) else None
    usage = draw(st.none() | st.builds(lambda n: GenerateContentResponseUsageMetadata(
        prompt_token_count=n, candidates_token_count=1, total_token_count=n + 1), st.integers(0, 99)))  # fmt: skip
    return Event(
        invocation_id=draw(IDS), author=author, content=content, partial=draw(st.none() | st.booleans()),
        actions=EventActions(skip_summarization=draw(st.none() | st.booleans()),
                             state_delta=draw(st.dictionaries(st.sampled_from(["k", "键"]), TEXT, max_size=2))),
        timestamp=draw(st.floats(1.7e9, 1.8e9)), branch=draw(st.none() | st.just("root.sub")),
        request_id=draw(st.none() | IDS), usage_metadata=usage, custom_metadata=draw(st.none() | st.just({"x": "值"})),
        error_code=draw(st.none() | st.just("500")), error_message=draw(st.none() | TEXT),
    )  # fmt: skip


def _wire(event: SessionEvent) -> SessionEvent:
    """Through the events topic (JSON) and the Cassandra row (content held in the text column)."""
    decoded = parse_event_record(event.model_dump_json(exclude_none=True).encode())
    assert isinstance(decoded, SessionEvent)
    return restore_event_json(stored_event_json(decoded), decoded.message.content or "")


@settings(max_examples=150, deadline=None)
@given(st.lists(events(), min_size=1, max_size=4))
def test_events_round_trip_through_the_wire_and_the_store(originals: list[Event]) -> None:
    clock = Clock()
    converted = [_wire(e) for event in originals for e in to_session_events(event, KEY, clock)]
    assert to_trpc_events(converted) == originals
    stamps = [e.timestamp for e in converted]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)  # Cassandra keeps their order


def _event(*parts: Part, author: str = "travel_agent", **kw: Any) -> Event:
    return Event(invocation_id="inv-1", author=author, content=Content(role="model", parts=list(parts)), **kw)


def test_the_chat_messages_are_what_distill_summarizes() -> None:
    clock = Clock()
    [user] = to_session_events(_event(Part.from_text(text="我想去北京"), author="user"), KEY, clock)
    assert (user.message.role, user.author, user.message.content, user.request_id) == ("user", "user", "我想去北京",
                                                                                        "inv-1")  # fmt: skip
    call = _event(Part.from_text(text="查一下"), Part(text="先想想", thought=True),
                  Part(function_call=FunctionCall(id="c1", name="get_weather", args={"city": "北京"})))  # fmt: skip
    [head] = to_session_events(call, KEY, clock)
    assert head.message.content == "查一下" and head.message.reasoning_content == "先想想"
    assert [(c.id, c.function.name, c.function.arguments) for c in head.message.tool_calls] == [
        ("c1", "get_weather", '{"city": "北京"}')
    ]
    results = _event(Part(function_response=FunctionResponse(id="c1", name="w", response={"t": "晴"})),
                     Part(function_response=FunctionResponse(id="c2", name="w", response={"t": "雨"})))  # fmt: skip
    first, second = to_session_events(results, KEY, clock)
    assert [(m.message.role, m.message.tool_call_id, m.message.content) for m in (first, second)] == [
        ("tool", "c1", '{"t": "晴"}'), ("tool", "c2", '{"t": "雨"}')]  # fmt: skip
    assert second.event_id == f"{results.id}~1"
    flags = _event(Part.from_text(text="debug"), partial=True, actions=EventActions(skip_summarization=True))
    [flagged] = to_session_events(flags, KEY, clock)
    # The Python guide's use: a debug event skipped by the summary (a function response is not: see below)
    assert flagged.partial and flagged.skip_summarization
    [state_only] = to_session_events(Event(invocation_id="i", author="a", actions=EventActions(state_delta={"k": 1})),
                                     KEY, clock, state={"k": 1})  # fmt: skip
    assert state_only.message.role == "system" and state_of([state_only]) == {"k": 1}


def test_the_text_is_stored_once() -> None:
    [event] = to_session_events(_event(Part.from_text(text="结果 " * 3000)), KEY, Clock())
    assert event.model_dump_json().count("结果") == 3000


def test_a_piece_without_its_head_and_foreign_events_are_rebuilt_from_the_message() -> None:
    results = _event(Part(function_response=FunctionResponse(id="c1", name="w", response={"t": "晴"})),
                     Part(function_response=FunctionResponse(id="c2", name="w", response={"t": "雨"})))  # fmt: skip
    _, piece = to_session_events(results, KEY, Clock())
    [rebuilt] = to_trpc_events([piece])
    assert rebuilt.get_function_responses()[0].response == {"t": "雨"}
    assert rebuilt.get_function_responses()[0].id == "c2"
    foreign = SessionEvent.model_validate({
        "app_name": "app", "user_id": "u", "session_id": "s", "event_id": "x", "timestamp": "2026-01-01T00:00:00Z",
        "author": "bot", "message": {"role": "assistant", "content": "好的",
                                     "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": '{"q": 1}'}}]},
    })  # fmt: skip
    event = from_message(foreign)
    assert event.get_text() == "好的" and event.get_function_calls()[0].args == {"q": 1}


async def test_code_an_executor_ran_and_its_output_are_in_the_summary_input() -> None:
    """Oracle: trpc shows the model the code its code executor ran and the output (fenced text); a summary
    covering their events must hold them too, or the output (often what the answer rests on) is gone.

    Every event carries a marker; the scripted OpenAI-compatible server echoes the markers its request
    held. Before the summary the view gives every event back; after it, every marker is in the summary.
    """
    book, clock = MarkerBook(), Clock()
    turns = [
        _event(Part.from_text(text=f"算一下 2**100 的各位数字之和{book.mint('ask')}"), author="user"),
        _event(Part.from_text(text="我写段代码算。"),
               Part.from_executable_code(code=f"print(sum(map(int, str(2**100))))  # {book.mint('code')}",
                                         language="PYTHON")),
        Event(invocation_id="inv-1", author="travel_agent",
              content=Content(role="user", parts=[Part.from_code_execution_result(
                  outcome="OUTCOME_OK", output=f"115 {book.mint('output')}")])),
        _event(Part.from_text(text=f"各位数字之和是 115。{book.mint('answer')}")),
    ]  # fmt: skip
    events = [e for turn in turns for e in to_session_events(turn, KEY, clock)]
    assert to_trpc_events(events) == turns  # the view, before any summary

    with OpenAIServer(default=MarkerEcho()) as server:
        model = OpenAIChatModel(LLMSettings(base_url=server.base_url, api_key=SecretStr("k"), model="m",
                                            context_window=64_000))  # fmt: skip
        result = await Summarizer(model).summarize("", events, session=KEY)
        sent = request_text(server.requests[-1].body)
    assert result.last_event is not None and result.last_event.event_id == events[-1].event_id
    lost = {part: ms for part, ms in book.by_event.items() if not set(ms) <= set(find_markers(result.text))}
    assert not lost, f"{sorted(lost)} are neither in the summary nor visible once the summary covers their events"
    assert "```python\nprint(sum(map(int, str(2**100))))" in sent and "```tool_output\n115" in sent


async def test_a_tool_response_that_is_the_turns_answer_is_in_the_summary_input() -> None:
    """Oracle: trpc's ``actions.skip_summarization`` marks a tool's response that is the turn's answer
    (``AgentTool(..., skip_summarization=True)``: no model call rephrases it). Read as distill's flag (the
    producer need not remember the event), that answer was left out of every summary and hidden once the
    boundary passed it: in neither the summary nor the request.
    """
    book, clock = MarkerBook(), Clock()
    booked = {"result": f"已订 NH-110，座位 32A {book.mint('answer')}"}
    turns = [
        _event(Part.from_text(text=f"帮我订明天去东京的机票 ✈️{book.mint('ask')}"), author="user"),
        _event(Part(function_call=FunctionCall(id="c1", name="booking_agent",
                                               args={"request": f"东京 明天{book.mint('call')}"}))),
        _event(Part(function_response=FunctionResponse(id="c1", name="booking_agent", response=booked)),
               actions=EventActions(skip_summarization=True)),
        _event(Part.from_text(text=f"好的，谢谢 🙏{book.mint('thanks')}"), author="user"),
    ]  # fmt: skip
    events = [e for turn in turns for e in to_session_events(turn, KEY, clock)]
    assert to_trpc_events(events) == turns  # the flag is kept in the record: trpc gets its event back
    with OpenAIServer(default=MarkerEcho()) as server:
        model = OpenAIChatModel(LLMSettings(base_url=server.base_url, api_key=SecretStr("k"), model="m",
                                            context_window=64_000))  # fmt: skip
        result = await Summarizer(model).summarize("", events, session=KEY)
    assert result.last_event is not None and result.last_event.event_id == events[-1].event_id
    lost = {part: ms for part, ms in book.by_event.items() if not set(ms) <= set(find_markers(result.text))}
    assert not lost, f"{sorted(lost)} are neither in the summary nor visible once the summary covers their events"


def test_images_and_files_are_named_in_the_text_never_copied() -> None:
    """An image or file part is in the event's text (kind, MIME type, size, display name, URI); its bytes are not."""
    png = b"\x89PNG\r\n" + bytes(range(256)) * 40
    photo = Part(inline_data=Blob(data=png, mime_type="image/png", display_name="收据.png"))
    ask = _event(Part.from_text(text="这张收据的金额是多少？"), photo, author="user")
    [user] = to_session_events(ask, KEY, Clock())
    assert user.message.content == "这张收据的金额是多少？[image: image/png, 10,246 bytes, 收据.png]"
    [doc] = to_session_events(_event(Part.from_uri(file_uri="gs://桶/合同.pdf", mime_type="application/pdf")),
                              KEY, Clock())  # fmt: skip
    assert doc.message.content == "[file: application/pdf, gs://桶/合同.pdf]"
    [voice] = to_session_events(_event(Part.from_bytes(data=b"RIFF" * 10, mime_type="audio/wav")), KEY, Clock())
    assert voice.message.content == "[audio: audio/wav, 40 bytes]"
    assert to_trpc_events([_wire(user)]) == [ask]  # the bytes come back from the native record


async def test_an_image_or_file_the_model_saw_is_in_the_summary_input() -> None:
    """Oracle: an attachment's name or URI reaches the summary input, so its markers survive the summary."""
    book, clock = MarkerBook(), Clock()
    turns = [
        _event(Part.from_text(text=f"看看这张收据{book.mint('ask')}"),
               Part(inline_data=Blob(data=b"\x89PNG" * 500, mime_type="image/png",
                                     display_name=f"收据{book.mint('image')}.png")), author="user"),
        _event(Part.from_uri(file_uri=f"gs://桶/合同{book.mint('file')}.pdf", mime_type="application/pdf"),
               author="user"),
        _event(Part.from_text(text=f"金额是 165 元。{book.mint('answer')}")),
    ]  # fmt: skip
    events = [e for turn in turns for e in to_session_events(turn, KEY, clock)]
    assert to_trpc_events(events) == turns
    with OpenAIServer(default=MarkerEcho()) as server:
        model = OpenAIChatModel(LLMSettings(base_url=server.base_url, api_key=SecretStr("k"), model="m",
                                            context_window=64_000))  # fmt: skip
        result = await Summarizer(model).summarize("", events, session=KEY)
        sent = request_text(server.requests[-1].body)
    lost = sorted(name for name, ms in book.by_event.items() if not set(ms) <= set(find_markers(result.text)))
    assert not lost, f"attachments {lost} are in no summary once it covers their events"
    assert "iVBOR" not in sent and "x89" not in sent, "the bytes (or their base64) are never in the summary input"
