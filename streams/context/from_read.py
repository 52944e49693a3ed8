"""Assembling the next request from the read side's one context read (``projections.context_read``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from schemas.reads import ContextRead
from streams.context.assembly import AssembledRequest, AssemblyOptions, CurrentMessage, assemble, summary_block
from streams.context.history import covered_mask
from streams.context.notes import recall_hint
from streams.context.recall_tools import SESSION_LOAD
from streams.errors import DistillError
from streams.rules.filter_keys import related

READ_CAP_MARK = "[distill: older events left out of this request"
"""Starts the note of a read its event cap stopped (in the request's latest user turn)."""


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
    notes = []
    if read.stats.truncated:
        notes.append(read_cap_note_of(read, opts, tools))
    elif read.stats.current_unread and current_user_message is None:
        notes.append(current_unread_note())
    return assemble(system_prompt, read.summary, read.events, current, tools, opts, notes=notes)


def left_out_by_cap(read: ContextRead, *, answers_read_current: bool) -> bool:
    """Whether the read's event cap left out an event a request built from it shows: an event after the
    boundary (``stats.truncated``), or — for a request answering the read's current user message rather than
    a new one — that message (``stats.current_unread``). What :func:`assemble_from_read` puts a note for."""
    return read.stats.truncated or (answers_read_current and read.stats.current_unread)


def _offers_load(options: AssemblyOptions, tools: Sequence[Mapping[str, Any]]) -> bool:
    offered = {str((t.get("function") or {}).get("name", "")) for t in tools}
    return options.recall.load or SESSION_LOAD in offered


def read_cap_note_of(read: ContextRead, options: AssemblyOptions, tools: Sequence[Mapping[str, Any]] = ()) -> str:
    """The note of a read its event cap stopped (``stats.truncated``): the events logged before the oldest one
    the request can show after the summary's boundary (or the history's first, without the summary) are not
    read (:func:`read_cap_note`)."""
    shown = bool(summary_block(read.summary, options))
    visible = [e for e in read.events if related(e.filter_key, read.filter_key)]
    boundary = read.summary.boundary if shown and read.summary is not None else None
    covered = covered_mask(visible, boundary, log=read.events)
    first = next((e.event_id for e, c in zip(visible, covered, strict=True) if not c), None)
    return read_cap_note(first, after_summary=shown, session_load=_offers_load(options, tools))


def read_cap_note(first_event_id: str | None, *, after_summary: bool, session_load: bool) -> str:
    """The request's note when the read stopped at its event cap (``ContextReader.max_events``): older events
    are left out, from where to where, and how to read them back.

    The read takes the newest events (20 000 by default): what lies before them — the oldest of the
    history without a summary shown, else the oldest after the summary's boundary — is in neither the
    request nor the summary it shows. The note says so, names the event the request's history starts at
    (the events before it, back to the boundary, are the ones missing) and how to reach them.
    """
    since = " after the summary's boundary" if after_summary else ""
    if first_event_id is None:
        return f"{READ_CAP_MARK}: the session's read stops at its event cap, older events{since} are not shown]"
    if session_load:
        back = f'session_load(event_id="{first_event_id}", before=4) reads back from it'
    else:
        back = "they stay stored in the session"
    return (
        f"{READ_CAP_MARK}: the session's read stops at its event cap; the events logged{since} before "
        f"event_id={first_event_id} (where this history starts) are not shown; {back}]"
    )


def current_unread_note() -> str:
    """The request's note when the read's scan back for the user message it answers stopped at its event cap
    (``stats.current_unread``): that message lies further before the summary's boundary than the cap reaches,
    so the request answers without it. The events after the boundary are all read: nothing else is missing."""
    return (
        f"{READ_CAP_MARK}: the session's read stops at its event cap before reaching the user message this "
        f"request answers (it lies before the summary's boundary); {recall_hint(False)}]"
    )
