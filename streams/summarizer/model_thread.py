"""Model calls on an event loop of their own, in a thread: the client's work off the ingest loop.

A worker's track agent and its summary jobs share one event loop. A job's model call is
mostly the HTTP client's Python work (building the request, parsing the answer: about half
of a job's CPU with the ``openai`` SDK), and the loop runs ready steps in arrival order, so
a burst of jobs (every session firing together) queued the events fetched meanwhile behind
dozens of client steps: the event→job tail. :class:`ThreadedModel` runs the wrapped model's
calls on a loop in a thread. Both threads still share the interpreter lock, but the
interpreter hands it over every few milliseconds (``sys.getswitchinterval``), so the ingest
loop waits at most that long for a client step instead of behind the whole queue of them.

Nothing else changes: the same model answers, its errors (retryable, context length,
permanent) reach the caller as raised, and a caller cancelled (a job's timeout, a stop)
cancels the call in the thread.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future

from streams.summarizer.model import ModelResponse, SummaryModel
from streams.summarizer.request import ChatRequest


class ThreadedModel:
    """A :class:`~streams.summarizer.model.SummaryModel` whose calls run on ``inner`` in a thread of their own.

    The thread and its loop start at the first call (a replay the cache answers never
    starts them) and end with :meth:`close` (or with the process: the thread is a daemon).
    ``inner`` is only ever called on that loop, so its client binds its connections there.
    """

    def __init__(self, inner: SummaryModel, *, thread_name: str = "distill-model") -> None:
        self.inner = inner
        self.name = inner.name
        self.context_window = inner.context_window
        self.provider_budget = inner.provider_budget
        self._thread_name = thread_name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def started(self) -> bool:
        return self._loop is not None

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                thread = threading.Thread(target=run, name=self._thread_name, daemon=True)
                thread.start()
                ready.wait()
                self._loop, self._thread = loop, thread
            return self._loop

    async def complete(self, request: ChatRequest) -> ModelResponse:
        call: Future[ModelResponse] = asyncio.run_coroutine_threadsafe(
            self.inner.complete(request), self._running_loop()
        )
        # wrap_future chains both ways: the caller's cancellation cancels the call's task there.
        return await asyncio.wrap_future(call)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the thread's loop (calls still running there are cancelled) and wait for the thread."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return

        def stop() -> None:
            for task in asyncio.all_tasks(loop):
                task.cancel()
            loop.call_soon(loop.stop)

        loop.call_soon_threadsafe(stop)
        thread.join(timeout)
        if not thread.is_alive():
            loop.close()
