"""The worker's Faust monitor skips the per-record stats but keeps what Faust reads."""

from __future__ import annotations

from typing import Any

from faust.types import TP

from schemas.settings import Settings
from streams.app.factory import create_app
from streams.app.monitor import LeanMonitor


def test_the_worker_uses_the_lean_monitor() -> None:
    app: Any = create_app(Settings())
    assert isinstance(app.monitor, LeanMonitor)


def test_stream_inbound_time_is_kept_and_nothing_else_is_counted() -> None:
    monitor = LeanMonitor()
    tp = TP("events", 0)
    assert monitor.on_stream_event_in(tp, 5, object(), object()) is None
    assert tp in monitor.stream_inbound_time
    monitor.on_stream_event_out(tp, 5, object(), object(), None)
    monitor.on_send_completed(object(), monitor.on_send_initiated(object(), "t", object(), 1, 1), object())
    assert (monitor.events_total, monitor.messages_sent, monitor.messages_received_total) == (0, 0, 0)
