"""Property: any delta, any budget -> a fitting request over a complete prefix, or a clear error."""

from hypothesis import HealthCheck, given, settings
from hypothesis import event as note
from hypothesis import strategies as st

from schemas import SessionEvent
from streams.rules.tokens import SimpleTokenCounter
from streams.summarizer.budget import TRUNCATION_MARKER, safe_prefix_ends
from streams.summarizer.conversation import DEFAULT_FORMATTER
from streams.summarizer.plan import SourceTooLargeError
from streams.summarizer.request import ChatRequest, count_request
from streams.summarizer.summarizer import Summarizer

from .helpers import SESSION, ScriptedModel, event, user_text

COUNTER = SimpleTokenCounter()


def assert_previous_kept(requests: list[ChatRequest], previous: str, rolled: str) -> None:
    """Each request carries its pass's previous summary, whole or cut head+tail with the marker.

    The first pass builds on ``previous``; each later pass on the summary the model returned (``rolled``).
    """
    expected = previous.strip()
    for request in requests:
        assert request.source is not None
        kept = request.source.previous_summary
        if expected:
            assert kept, "the previous summary was silently dropped"
            if kept != expected:
                head, _, tail = kept.partition(TRUNCATION_MARKER)
                assert head and expected.startswith(head) and expected.endswith(tail)
        else:
            assert not kept
        expected = rolled


def was_sent(e: SessionEvent, text: str) -> bool:
    """The event's text is in ``text``, or its payloads were cut with a marker naming it."""
    return DEFAULT_FORMATTER.event_text(e) in text or f'session_load(event_id="{e.event_id}")' in text


@st.composite
def deltas(draw: st.DrawFn) -> list[SessionEvent]:
    events: list[SessionEvent] = []
    for r in range(draw(st.integers(1, 6))):
        i = len(events)
        events.append(event(i, "user", f"u{i} " + "x" * draw(st.integers(0, 300))))
        if draw(st.booleans()):
            call = f"call{r}"
            events.append(event(i + 1, "agent", None, tool_calls=[(call, "tool", f'{{"k": {r}}}')]))
            events.append(event(i + 2, "agent", f"r{i + 2} " + "y" * draw(st.integers(0, 400)), tool_call_id=call))
        j = len(events)
        events.append(event(j, "agent", f"a{j} " + "z" * draw(st.integers(0, 300))))
    return events


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=deltas(),
    window=st.integers(30, 1500),
    previous=st.text(alphabet="pq ", max_size=600),
    separate=st.booleans(),
)
async def test_any_delta_any_budget(events: list[SessionEvent], window: int, previous: str, separate: bool) -> None:
    prompt = "P {previous_summary}\nC {conversation_text}" if separate else "C {conversation_text}"
    model = ScriptedModel(default="sum", context_window=window)
    summarizer = Summarizer(model, prompt=prompt, token_counter=COUNTER, max_passes=100)
    budget = summarizer.input_budget()
    try:
        result = await summarizer.summarize(previous, events, session=SESSION)
    except SourceTooLargeError as exc:
        note("refused")
        assert exc.tokens > exc.budget
        assert "refusing to" in str(exc)
        for request in model.requests:
            assert count_request(request, COUNTER) <= budget
        assert_previous_kept(model.requests, previous, "sum")
        return
    # Every request sent fits; the passes cover the whole delta in order, each ending at a safe point.
    for request in model.requests:
        assert count_request(request, COUNTER) <= budget
    assert_previous_kept(model.requests, previous, "sum")
    assert result.caught_up
    note("single pass" if result.passes == 1 else "several passes")
    assert result.covered_events == len(events)
    assert result.last_event == events[-1]
    sent = "\n".join(user_text(r) for r in model.requests)
    for e in events:
        assert was_sent(e, sent), f"{e.event_id} was never sent"
    ends = set(safe_prefix_ends(events, DEFAULT_FORMATTER)) | {len(events)}
    position = 0
    for request in model.requests:
        assert request.source is not None
        covered = [e for e in events[position:] if was_sent(e, request.source.conversation_text)]
        position += len(covered)
        assert position in ends
