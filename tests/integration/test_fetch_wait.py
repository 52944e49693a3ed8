"""A worker on a thin, steady stream waits longer per fetch when its event→job budget leaves room.

The track agent notes each batch's lag (fetch to writes sent) and the drain loop sets the next
fetches' wait to the budget less that lag (``streams.app.fetch_wait``), never below
``batch_fetch_wait_ms``; the worker shows the wait it chose as ``distill_fetch_wait_ms``. The
budget here is generous (600 ms) so that a loaded machine's lags still leave room above the floor.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from schemas.settings import Settings
from streams.clients.kafka_config import producer_kwargs
from tests.integration.pipeline_support import create_topics, scripted_pipeline_settings, workers
from tests.support.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

FLOOR_MS = 30
BUDGET_MS = 600
SESSIONS = 20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _fetch_wait(port: int) -> float | None:
    """The worker's ``distill_fetch_wait_ms`` (``None``: not served, or not set yet)."""
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except (urllib.error.URLError, OSError):
        return None
    for line in body.splitlines():
        if line.startswith("distill_fetch_wait_ms "):
            value = float(line.split()[1])
            return value or None  # 0: never set (no fetch with records yet)
    return None


def _event(n: int) -> bytes:
    """Event ``n // SESSIONS`` of session ``n % SESSIONS``: rounds of a user message and the bot's answer."""
    ts = time.time()
    i = n // SESSIONS
    role = "user" if i % 2 == 0 else "assistant"
    return json.dumps({
        "app_name": "fw", "user_id": "u", "session_id": f"s{n % SESSIONS}", "event_id": f"e{i}",
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts * 1e6) % 1000000:06d}Z",
        "request_id": f"r{i // 2}", "author": "user" if role == "user" else "bot",
        "message": {"role": role, "content": f"message {i}"},
    }).encode()  # fmt: skip


async def _paced_until(settings: Settings, port: int, rate: float, timeout: float) -> list[float]:
    """Events at ``rate`` until the worker's wait rose above the floor (at most ``timeout`` s); every wait
    it showed meanwhile."""
    producer = AIOKafkaProducer(**producer_kwargs(settings.kafka))
    await producer.start()
    seen: list[float] = []
    try:
        start = next_look = time.monotonic()
        n = 0
        while time.monotonic() - start < timeout:
            await producer.send(settings.topics.events, _event(n), key=f"fw/u/s{n % SESSIONS}".encode())
            n += 1
            if time.monotonic() >= next_look:
                next_look += 0.5
                wait = await asyncio.to_thread(_fetch_wait, port)
                if wait is not None:
                    seen.append(wait)
                    if wait > FLOOR_MS:
                        break
            await asyncio.sleep(max(0.0, start + n / rate - time.monotonic()))
        await producer.flush()
    finally:
        await producer.stop()
    return seen


def _worker_settings(base: Settings, llm_url: str, port: int, event_threshold: int) -> Settings:
    return scripted_pipeline_settings(
        base, llm_url, partitions=2,
        worker={"metrics_port": port, "batch_fetch_wait_ms": FLOOR_MS, "event_job_budget_ms": BUDGET_MS},
        event_threshold=event_threshold,
    )  # fmt: skip


def test_a_thin_stream_lengthens_the_fetch_wait_within_the_budget(service_settings: Settings, tmp_path: Path) -> None:
    port = _free_port()
    with OpenAIServer() as llm:
        settings = _worker_settings(service_settings, llm.base_url, port, event_threshold=1_000_000)
        asyncio.run(create_topics(settings))
        with workers(settings, tmp_path) as procs:
            seen = asyncio.run(_paced_until(settings, port, rate=100, timeout=60))
            assert seen, procs[0].log_text()[-3000:]
            # The first fetches with records wait the floor (no lag noted yet), later ones longer.
            assert seen[0] >= FLOOR_MS
            assert FLOOR_MS < seen[-1] <= BUDGET_MS - 5, (seen, procs[0].log_text()[-3000:])


def test_while_events_start_jobs_the_fetch_wait_stays_at_the_floor(service_settings: Settings, tmp_path: Path) -> None:
    """A job's way crosses the same fetches (jobs topic, summaries topic): no longer waits meanwhile."""
    port = _free_port()
    with OpenAIServer() as llm:
        settings = _worker_settings(service_settings, llm.base_url, port, event_threshold=1)
        asyncio.run(create_topics(settings))
        with workers(settings, tmp_path) as procs:
            seen = asyncio.run(_paced_until(settings, port, rate=100, timeout=15))
            assert len(seen) >= 5, procs[0].log_text()[-3000:]
            assert set(seen) == {FLOOR_MS}, seen
