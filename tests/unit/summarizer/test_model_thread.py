"""Model calls in a thread of their own: the caller's loop stays free, answers and errors are the model's."""

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest

from schemas.settings import LLMSettings
from streams.errors import PermanentError, RetryableError
from streams.summarizer.model import ContextLengthError, ModelResponse
from streams.summarizer.model_thread import ThreadedModel
from streams.summarizer.openai_adapter import OpenAIChatModel
from streams.summarizer.request import ChatRequest, standalone_request
from tests.support.openai_server import OpenAIServer, answer, bad_request, context_length_exceeded, server_error

REQUEST = ChatRequest(messages=[{"role": "user", "content": "总结这段对话 M1"}])


class BusyModel:
    """Holds its thread in Python for ``seconds`` (a client parsing a large answer), then answers."""

    name = "busy"
    context_window = 8_000
    provider_budget = None

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.threads: list[int] = []

    async def complete(self, request: ChatRequest) -> ModelResponse:
        self.threads.append(threading.get_ident())
        end = time.perf_counter() + self.seconds
        while time.perf_counter() < end:
            pass
        return ModelResponse(text=f"seen {len(request.messages)}", model=self.name)


class SleepingModel:
    name = "sleepy"
    context_window = None
    provider_budget = None

    def __init__(self) -> None:
        self.started = threading.Event()
        self.cancelled = threading.Event()

    async def complete(self, request: ChatRequest) -> ModelResponse:
        self.started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return ModelResponse(text="late", model=self.name)


async def _ticks_during(model: object, seconds_of_ticking: float = 1.0) -> tuple[int, ModelResponse]:
    ticks = 0
    stop = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not stop.is_set():
            await asyncio.sleep(0.001)
            ticks += 1

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)  # the ticker is waiting before the call starts
    before = ticks
    response = await model.complete(REQUEST)  # type: ignore[attr-defined]
    during = ticks - before
    stop.set()
    await task
    return during, response


async def test_the_callers_loop_runs_while_the_model_works_in_its_thread() -> None:
    inner = BusyModel(0.3)
    threaded = ThreadedModel(inner)
    try:
        during, response = await _ticks_during(threaded)
    finally:
        threaded.close()
    assert response.text == "seen 1"
    assert inner.threads and inner.threads[0] != threading.get_ident()
    assert during > 0, "the caller's loop never ran while the model held its thread"


async def test_called_directly_the_same_model_blocks_the_callers_loop() -> None:
    # The contrast that makes the test above mean something: on the caller's loop nothing else runs.
    during, response = await _ticks_during(BusyModel(0.1))
    assert response.text == "seen 1"
    assert during == 0


async def test_a_cancelled_caller_cancels_the_call_in_the_thread() -> None:
    inner = SleepingModel()
    threaded = ThreadedModel(inner)
    try:
        call = asyncio.create_task(threaded.complete(REQUEST))
        assert await asyncio.to_thread(inner.started.wait, 10)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert await asyncio.to_thread(inner.cancelled.wait, 10)
    finally:
        threaded.close()


async def test_the_thread_starts_at_the_first_call_and_close_ends_it() -> None:
    threaded = ThreadedModel(BusyModel(0.0), thread_name="distill-model-test")
    assert not threaded.started
    assert not any(t.name == "distill-model-test" for t in threading.enumerate())
    await threaded.complete(REQUEST)
    assert threaded.started
    assert any(t.name == "distill-model-test" for t in threading.enumerate())
    threaded.close()
    assert not threaded.started
    assert not any(t.name == "distill-model-test" for t in threading.enumerate())
    threaded.close()  # twice is harmless


@pytest.fixture(scope="module")
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer() as srv:
        yield srv


@pytest.fixture
def threaded_client(server: OpenAIServer) -> Iterator[ThreadedModel]:
    server.requests.clear()
    model = ThreadedModel(
        OpenAIChatModel(LLMSettings(base_url=server.base_url, model="m", max_retries=0, timeout_s=10))
    )
    yield model
    model.close()


async def test_the_real_client_answers_through_the_thread(server: OpenAIServer, threaded_client: ThreadedModel) -> None:
    server.script(answer("要点：M1 已记录"))
    response = await threaded_client.complete(standalone_request("总结", "M1 的内容"))
    assert response.text == "要点：M1 已记录"
    assert server.requests and "M1" in server.requests[-1].text()


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (server_error(), RetryableError),
        (context_length_exceeded(), ContextLengthError),
        (bad_request(), PermanentError),
    ],
)
async def test_the_clients_errors_reach_the_caller_as_raised(
    server: OpenAIServer, threaded_client: ThreadedModel, reply: object, error: type[Exception]
) -> None:
    server.script(reply)  # type: ignore[arg-type]
    with pytest.raises(error):
        await threaded_client.complete(standalone_request("总结", "M2 的内容"))
