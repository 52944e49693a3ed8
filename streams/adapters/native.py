"""Keeping a framework's own record inside a :class:`~schemas.SessionEvent`, losslessly.

A session event carries the chat message distill summarizes, counts and
searches. The framework's record (a trpc ``Event``, a Responses-API item) has
more: ids, part types, flags, metadata. It travels in the event's ``native``
field (producers' extra fields are kept by every stage), so converting back
gives the record as it was. The message text is not stored twice: the path of
the one field that equals ``message.content`` is recorded in ``content_at``
and the field itself left out; converting back puts ``message.content`` there,
which is also how a compacted view shows a shortened tool result.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from schemas import SessionEvent, SummaryBoundary

NATIVE_FIELD = "native"
PART_OF_FIELD = "native_part_of"
"""Set on the extra events one record was split into (e.g. several tool results); names the head event."""

Path = tuple[str | int, ...]


def native_of(event: SessionEvent, fmt: str) -> dict[str, Any] | None:
    """The ``native`` block of ``event`` when it holds a record of format ``fmt``."""
    extra = event.model_extra or {}
    block = extra.get(NATIVE_FIELD)
    if isinstance(block, dict) and block.get("format") == fmt:
        return block
    return None


def part_of(event: SessionEvent) -> str | None:
    """The head event id when ``event`` is an extra piece of a split record."""
    value = (event.model_extra or {}).get(PART_OF_FIELD)
    return value if isinstance(value, str) else None


def get_path(data: Any, path: Path) -> Any:
    for step in path:
        data = data[step]
    return data


def set_path(data: Any, path: Path, value: Any) -> None:
    for step in path[:-1]:
        data = data[step]
    data[path[-1]] = value


def strip_content(record: dict[str, Any], path: Path | None, content: str | None) -> dict[str, Any]:
    """``record`` with the field at ``path`` left out when it equals ``content`` (block built by the caller)."""
    if path is None or content is None:
        return record
    out = copy.deepcopy(record)
    set_path(out, path, None)
    return out


def native_block(fmt: str, record: dict[str, Any], path: Path | None, content: str | None) -> dict[str, Any]:
    """The ``native`` value for ``record``: the text at ``path`` is dropped when it equals ``content``."""
    if path is not None and content is not None and get_path(record, path) == content:
        return {"format": fmt, "record": strip_content(record, path, content), "content_at": list(path)}
    return {"format": fmt, "record": record, "content_at": None}


def restore_record(block: dict[str, Any], content: str | None) -> dict[str, Any]:
    """The framework record of a ``native`` block, its text field filled from ``content``."""
    record: dict[str, Any] = copy.deepcopy(block["record"])
    path = block.get("content_at")
    if path:
        set_path(record, tuple(path), content if content is not None else "")
    return record


class Bounded(Protocol):
    """A summary as the clock needs it: its boundary (a record, or the read side's applied summary)."""

    @property
    def boundary(self) -> SummaryBoundary: ...


class Clock:
    """Strictly increasing event timestamps (millisecond steps: Cassandra's resolution)."""

    def __init__(self, last: datetime | None = None) -> None:
        self.last = last

    def next(self, wanted: datetime) -> datetime:
        step = timedelta(milliseconds=1)
        wanted = wanted.replace(microsecond=(wanted.microsecond // 1000) * 1000)
        if self.last is not None and wanted <= self.last:
            wanted = self.last + step
        self.last = wanted
        return wanted

    def seen(self, events: Sequence[SessionEvent], summary: Bounded | None = None) -> None:
        """Never go back before events already stored, nor to ``summary``'s cutoff.

        The cutoff counts even when the read holds no event (a summary covering all of them): the
        read side places an event logged after the boundary event by the log, whatever its stamp,
        but a summary whose boundary event is not stored (an older build's, by timestamp only) cuts
        by time, and an event stamped before its cutoff — another producer's clock ran ahead — would
        be cut from the next request.
        """
        stamps = [event.timestamp for event in events]
        if summary is not None:
            stamps.append(summary.boundary.cutoff_at)
        for stamp in stamps:
            if self.last is None or stamp > self.last:
                self.last = stamp
