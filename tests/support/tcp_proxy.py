"""A loopback TCP proxy that can be cut and restored, to simulate a Cassandra outage without touching Cassandra."""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Self


class TcpProxy:
    """Forwards ``127.0.0.1:<port>`` to ``target``; ``cut()`` drops every connection and refuses new ones."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = int(probe.getsockname()[1])
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tcp-proxy", daemon=True)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    def __enter__(self) -> Self:
        self._thread.start()
        self.restore()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cut()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def _call(self, coro: object) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)  # type: ignore[arg-type]

    def restore(self) -> None:
        """Accept connections again (same port)."""
        self._call(self._start())

    def cut(self) -> None:
        """Close the listener and every open connection."""
        self._call(self._stop())

    async def _start(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port, reuse_address=True)

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for w in list(self._writers):
            w.transport.abort()
        self._writers.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (OSError, ConnectionError):
                pass
            finally:
                dst.transport.abort()

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))
        self._writers -= {writer, up_writer}
