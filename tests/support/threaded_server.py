"""An aiohttp server on 127.0.0.1 (ephemeral port) running its own loop in a background thread.

Usable from any test, sync or async, whatever event loop the test itself runs.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Self

from aiohttp import web


class ThreadedServer:
    """Serves ``POST <path>`` with ``_handle``; subclasses set ``path`` and implement ``_handle``."""

    path = "/"
    thread_name = "test-http-server"

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raise NotImplementedError

    def start(self) -> Self:
        """Start serving; returns once the port is bound."""
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            app = web.Application()
            app.router.add_post(self.path, self._handle)
            # At stop, a request still being answered (a scripted hang) is cancelled after a second,
            # rather than holding the stop for aiohttp's default minute (``stop`` gives up at 10 s).
            runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
            loop.run_until_complete(runner.setup())
            site = web.TCPSite(runner, "127.0.0.1", 0)
            loop.run_until_complete(site.start())
            self.port = runner.addresses[0][1]
            ready.set()
            loop.run_forever()
            loop.run_until_complete(runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, name=self.thread_name, daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError(f"{type(self).__name__} did not start")
        return self

    def stop(self) -> None:
        """Stop serving and join the thread."""
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        self._loop = None
        self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
