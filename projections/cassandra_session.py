"""Opening a Cassandra session from settings, and awaiting driver futures from asyncio."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from cassandra import ConsistencyLevel
from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, ResponseFuture, Session
from cassandra.policies import DCAwareRoundRobinPolicy, ExponentialReconnectionPolicy, TokenAwarePolicy
from cassandra.query import named_tuple_factory

from schemas.settings import CassandraSettings


@lru_cache(maxsize=1024)
def _row_class(colnames: tuple[str, ...]) -> Any:
    # Made by the driver's own factory (its names and its fallback for odd ones), once per column list.
    return type(named_tuple_factory(list(colnames), [(None,) * len(colnames)])[0])


def named_tuple_rows(colnames: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[Any]:
    """The driver's default rows (``named_tuple_factory``), with one row class per column list.

    The driver's factory calls ``namedtuple()`` for every result, which
    compiles the class's source each time: about 0.4 ms of client CPU per
    query, most of what a small read costs the client.
    """
    row = _row_class(tuple(colnames))
    return [row(*values) for values in rows]


def open_cluster(settings: CassandraSettings) -> Cluster:
    """A driver ``Cluster`` for ``settings`` (not yet connected)."""
    auth = None
    if settings.username is not None:
        password = settings.password.get_secret_value() if settings.password else ""
        auth = PlainTextAuthProvider(username=settings.username, password=password)
    profile = ExecutionProfile(
        load_balancing_policy=TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc=settings.local_datacenter)),
        request_timeout=settings.request_timeout_s,
        consistency_level=ConsistencyLevel.name_to_value[settings.consistency],
        row_factory=named_tuple_rows,
    )
    return Cluster(
        settings.contact_list,
        port=settings.port,
        auth_provider=auth,
        connect_timeout=settings.connect_timeout_s,
        # The control connection reads the peers and the schema on connect; the driver's 2 s
        # default failed `connect` outright (NoHostAvailable) while a node applied schema changes.
        control_connection_timeout=settings.connect_timeout_s,
        execution_profiles={EXEC_PROFILE_DEFAULT: profile},
        protocol_version=5,
        reconnection_policy=reconnection_policy(settings),
    )


def reconnection_policy(settings: CassandraSettings) -> ExponentialReconnectionPolicy:
    """Reconnect to a downed host from 0.25 s, doubling, capped at ``reconnect_max_delay_s``, forever."""
    cap = settings.reconnect_max_delay_s
    return ExponentialReconnectionPolicy(base_delay=min(0.25, cap), max_delay=cap, max_attempts=None)


def connect(settings: CassandraSettings, keyspace: str | None = None) -> tuple[Cluster, Session]:
    """Open a cluster and a session (optionally bound to ``keyspace``). Blocking."""
    cluster = open_cluster(settings)
    return cluster, cluster.connect(keyspace)


def _resolve(fut: asyncio.Future[Any], value: Any) -> None:
    if not fut.done():
        fut.set_result(value)


def _reject(fut: asyncio.Future[Any], exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)


def aexecute(session: Session, statement: Any, params: Any = None, **kwargs: Any) -> asyncio.Future[Any]:
    """Run ``statement`` without blocking the event loop; resolves to the first page of rows.

    Driver callbacks fire on its I/O thread, so results are handed to the loop
    with ``call_soon_threadsafe``.
    """
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[Any] = loop.create_future()
    response: ResponseFuture = session.execute_async(statement, params, **kwargs)
    response.add_callbacks(
        lambda rows: loop.call_soon_threadsafe(_resolve, fut, rows),
        lambda exc: loop.call_soon_threadsafe(_reject, fut, exc),
    )
    return fut


class _Window:
    """Runs ``work`` with at most ``concurrency`` statements in flight; resolves ``future`` when all are done.

    Each completion (on the driver's I/O thread) sends the next statement,
    so the pipe stays full without a round trip through the event loop; the
    loop is woken once, at the end. (The driver's ``execute_concurrent_async``
    blocks the calling thread until every statement is done, which froze the
    event loop for the whole batch.)
    """

    _MAX_DEPTH = 32
    """Completions that fire while a statement is being sent (a failing host) nest; past this, go via the loop."""

    def __init__(
        self, session: Session, work: list[tuple[Any, Any]], concurrency: int, loop: asyncio.AbstractEventLoop
    ) -> None:
        self._session = session
        self._work = work
        self._concurrency = max(1, concurrency)
        self._loop = loop
        self.future: asyncio.Future[list[tuple[bool, Any]]] = loop.create_future()
        self._results: list[tuple[bool, Any]] = [(False, None)] * len(work)
        self._lock = threading.Lock()
        self._next = 0
        self._done = 0
        self._depth = threading.local()

    def start(self) -> None:
        if not self._work:
            self.future.set_result([])
            return
        for _ in range(min(self._concurrency, len(self._work))):
            self._launch()

    def _launch(self) -> None:
        with self._lock:
            if self._next >= len(self._work):
                return
            index = self._next
            self._next += 1
        statement, params = self._work[index]
        depth = getattr(self._depth, "n", 0)
        self._depth.n = depth + 1
        try:
            response: ResponseFuture = self._session.execute_async(statement, params)
            response.add_callbacks(self._ok, self._failed, callback_args=(index,), errback_args=(index,))
        except Exception as exc:  # the driver refused to send: a failure of this statement, not of the run
            self._finish(index, False, exc)
        finally:
            self._depth.n = depth

    def _ok(self, rows: Any, index: int) -> None:
        self._finish(index, True, rows)

    def _failed(self, exc: BaseException, index: int) -> None:
        self._finish(index, False, exc)

    def _finish(self, index: int, ok: bool, value: Any) -> None:
        self._results[index] = (ok, value)
        with self._lock:
            self._done += 1
            last = self._done == len(self._work)
        if last:
            self._loop.call_soon_threadsafe(_resolve, self.future, self._results)
        elif getattr(self._depth, "n", 0) >= self._MAX_DEPTH:
            self._loop.call_soon_threadsafe(self._launch)
        else:
            self._launch()


def aexecute_many(
    session: Session, work: Sequence[tuple[Any, Any]], concurrency: int
) -> asyncio.Future[list[tuple[bool, Any]]]:
    """Run ``(statement, params)`` pairs with at most ``concurrency`` in flight, without blocking the loop.

    Resolves to ``(ok, rows or exception)`` per pair, in order; never raises
    for a failed statement (the caller decides what a failure means).
    """
    window = _Window(session, list(work), concurrency, asyncio.get_running_loop())
    window.start()
    return window.future
