"""Opening a Cassandra session from settings, and awaiting driver futures from asyncio."""

from __future__ import annotations

import asyncio
from typing import Any

from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, ResponseFuture, Session
from cassandra.policies import DCAwareRoundRobinPolicy, ExponentialReconnectionPolicy, TokenAwarePolicy

from schemas.settings import CassandraSettings


def open_cluster(settings: CassandraSettings) -> Cluster:
    """A driver ``Cluster`` for ``settings`` (not yet connected)."""
    auth = None
    if settings.username is not None:
        password = settings.password.get_secret_value() if settings.password else ""
        auth = PlainTextAuthProvider(username=settings.username, password=password)
    profile = ExecutionProfile(
        load_balancing_policy=TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc=settings.local_datacenter)),
        request_timeout=settings.request_timeout_s,
    )
    return Cluster(
        settings.contact_list,
        port=settings.port,
        auth_provider=auth,
        connect_timeout=settings.connect_timeout_s,
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
