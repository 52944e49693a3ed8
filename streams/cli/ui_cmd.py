"""``distill ui``: serve the session browser on localhost (read-only unless ``--allow-writes``)."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket

import click

from schemas.settings import load_settings

DEFAULT_PORT = 8765


def browser_url(host: str, port: int, path: str = "/") -> str:
    """The address to open (an IPv6 host in brackets)."""
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}{path}"


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


@click.command("ui")
@click.option(
    "--host", default="127.0.0.1", show_default=True, help="Address to bind (anything but loopback exposes the data)."
)
@click.option(
    "--port", default=DEFAULT_PORT, show_default=True, type=click.IntRange(0, 65535), help="Port (0: any free port)."
)
@click.option(
    "--allow-writes", is_flag=True, help="Enable the redrive and delete buttons (POST, with a per-process form token)."
)
@click.option("--log-level", default="INFO", show_default=True, help="Log level of the access log and the server.")
def command(host: str, port: int, allow_writes: bool, log_level: str) -> None:
    """Browse sessions, timelines with each summary's boundary, summary versions with diffs,
    session_search / session_load, dead letters, consumer lag and jobs in flight.

    Reads the Cassandra keyspace and the Kafka topics of the current settings.
    The access log carries method, path, status and time only (query parameter
    names, never their values).
    """
    import uvicorn

    from streams.logging_setup import setup_logging
    from streams.ui.sources import Sources
    from streams.ui.web import create_app

    settings = load_settings()
    setup_logging(log_level, settings.worker.log_json)
    if not _is_loopback(host):
        click.echo(f"warning: binding {host}: anyone who can reach it can read the sessions", err=True)
    sources = Sources.open(settings)
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise click.ClickException(f"cannot bind {host}:{port}: {exc.strerror} (try --port 0)") from None
        bound = sock.getsockname()[1]
        mode = "writes enabled" if allow_writes else "read-only"
        click.echo(f"distill ui → {browser_url(host, bound)}  ({mode}; Ctrl-C stops)", err=False)
        config = uvicorn.Config(
            create_app(sources, allow_writes=allow_writes), log_config=None, access_log=False,
            log_level=log_level.lower(), lifespan="off",
        )  # fmt: skip
        logging.getLogger("uvicorn.error").setLevel(max(logging.WARNING, logging.getLevelName(log_level.upper())))
        asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))
    finally:
        sources.close()
