"""Assembling the next request from the read side's one context read (``projections.context_read``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from schemas.reads import ContextRead
from streams.context.assembly import AssembledRequest, AssemblyOptions, CurrentMessage, assemble
from streams.errors import DistillError


class ReadKeyMismatch(DistillError, ValueError):
    """The options name another filter key than the one the read was made for."""


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
    the session's full history with the same summary.
    """
    opts = options or AssemblyOptions()
    if opts.filter_key and opts.filter_key != read.filter_key:
        raise ReadKeyMismatch(
            f"the read is for filter key {read.filter_key!r}, the options ask for {opts.filter_key!r}"
        )
    opts = dataclasses.replace(opts, filter_key=read.filter_key)
    current = current_user_message
    if current is None and read.current_event_id is not None:
        current = next((e for e in read.events if e.event_id == read.current_event_id), None)
    return assemble(system_prompt, read.summary, read.events, current, tools, opts)
