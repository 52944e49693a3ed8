"""A Faust monitor that keeps only what the worker reads: when a stream last took an event.

Faust's :class:`~faust.sensors.Monitor` is called for every record several times
(received, stream in, stream out, acked, and every produced record sent and
completed), keeping counters, per-stream and per-task tallies and latency
windows for its web stats pages: about 4 % of the worker's CPU at ingest rates.
distill reports its own metrics (:mod:`streams.metrics`); Faust itself reads one
field, ``stream_inbound_time`` (its consumer's "stream not processing" warning),
which is kept.
"""

from __future__ import annotations

from time import monotonic
from typing import Any

from faust.sensors.monitor import Monitor


class LeanMonitor(Monitor):
    """:class:`Monitor` without the per-record bookkeeping (see the module docstring)."""

    def on_message_in(self, tp: Any, offset: int, message: Any) -> None:
        pass

    def on_stream_event_in(self, tp: Any, offset: int, stream: Any, event: Any) -> dict[str, Any] | None:
        self.stream_inbound_time[tp] = monotonic()
        return None

    def on_stream_event_out(self, tp: Any, offset: int, stream: Any, event: Any, state: Any = None) -> None:
        pass

    def on_message_out(self, tp: Any, offset: int, message: Any) -> None:
        pass

    def on_table_get(self, table: Any, key: Any) -> None:
        pass

    def on_table_set(self, table: Any, key: Any, value: Any) -> None:
        pass

    def on_table_del(self, table: Any, key: Any) -> None:
        pass

    def on_send_initiated(self, producer: Any, topic: str, message: Any, keysize: int, valsize: int) -> Any:
        return None

    def on_send_completed(self, producer: Any, state: Any, metadata: Any) -> None:
        pass
