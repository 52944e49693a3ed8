"""Assembling the next request from the read side's one context read (``projections.context_read``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from schemas.reads import ContextRead
from streams.context.assembly import AssembledRequest, AssemblyOptions, CurrentMessage, assemble, summary_block
from streams.errors import DistillError


class ReadKeyMismatch(DistillError, ValueError):
    """The options name another filter key than the one the read was made for."""


class HistoryNotReadError(DistillError, ValueError):
    """The request will not show the read's summary, and the read holds only the events after its boundary.

    Assembling would silently hide everything before the boundary: read again
    with ``full_history=True`` (:meth:`projections.context_read.ContextReader.read`).
    """


def needs_full_history(read: ContextRead, options: AssemblyOptions) -> bool:
    """Whether ``read`` lacks history the request must show: it was cut at a summary the request will not show."""
    return read.summary is not None and not read.full_history and not summary_block(read.summary, options)


def assemble_from_read(
    system_prompt: str,
    read: ContextRead,
    current_user_message: CurrentMessage = None,
    tools: Sequence[Mapping[str, Any]] = (),
    options: AssemblyOptions | None = None,
) -> AssembledRequest:
    """:func:`~streams.context.assembly.assemble` over ``read``: its summary, its events, its filter key.

    ``current_user_message`` ``None`` answers the read's current user message
    (the one it was asked for, or the latest visible user turn). The options'
    ``filter_key`` must be empty or the read's (a read for one key cannot build
    another key's prompt). The request equals the one ``assemble`` builds from
    the session's full history with the same summary. Raises
    :class:`HistoryNotReadError` when the request will not show the summary
    (summaries off, or a formatter that renders nothing) and the read was cut
    at its boundary (:func:`needs_full_history`): never a request that hides
    history silently.
    """
    opts = options or AssemblyOptions()
    if opts.filter_key and opts.filter_key != read.filter_key:
        raise ReadKeyMismatch(
            f"the read is for filter key {read.filter_key!r}, the options ask for {opts.filter_key!r}"
        )
    opts = dataclasses.replace(opts, filter_key=read.filter_key)
    if needs_full_history(read, opts):
        raise HistoryNotReadError(
            f"the read of filter key {read.filter_key!r} holds only the events after the boundary of summary "
            f"v{read.summary.version if read.summary else 0}, which this request does not show "
            "(summaries off, or the formatter renders nothing): read with full_history=True"
        )
    current = current_user_message
    if current is None and read.current_event_id is not None:
        current = next((e for e in read.events if e.event_id == read.current_event_id), None)
    return assemble(system_prompt, read.summary, read.events, current, tools, opts)
