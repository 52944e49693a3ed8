"""Reading every page of a query from asyncio (``aexecute`` returns the first page only)."""

from __future__ import annotations

import asyncio
from typing import Any

from cassandra.cluster import Session


def afetch_all(session: Session, statement: Any, params: Any = None) -> asyncio.Future[list[Any]]:
    """All rows of ``statement``; the driver fetches the next page from its I/O thread."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[list[Any]] = loop.create_future()
    rows: list[Any] = []
    response = session.execute_async(statement, params)

    def finish(value: list[Any] | BaseException) -> None:
        if fut.done():
            return
        if isinstance(value, BaseException):
            fut.set_exception(value)
        else:
            fut.set_result(value)

    def on_page(page: list[Any]) -> None:
        rows.extend(page)
        if response.has_more_pages:
            response.start_fetching_next_page()
        else:
            loop.call_soon_threadsafe(finish, rows)

    response.add_callbacks(on_page, lambda exc: loop.call_soon_threadsafe(finish, exc))
    return fut
