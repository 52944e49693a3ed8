"""The write gate and the access log of ``distill ui``, on the ASGI app itself (no server, no services).

Every request here is refused or fails before any data source is touched, so
the app is built without one.
"""

from __future__ import annotations

import logging
from typing import Any, cast
from urllib.parse import urlencode

import pytest

from streams.ui.web import UI


async def call(app: Any, method: str, path: str, *, query: str = "", body: bytes = b"",
               headers: dict[str, str] | None = None) -> tuple[int, str]:  # fmt: skip
    """One HTTP request through the ASGI interface: ``(status, body text)``."""
    hdrs = {"host": "127.0.0.1:8765", **(headers or {})}
    if body:
        hdrs.setdefault("content-type", "application/x-www-form-urlencoded")
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
        "path": path, "raw_path": path.encode(), "query_string": query.encode(), "root_path": "",
        "headers": [(k.encode(), v.encode()) for k, v in hdrs.items()], "server": ("127.0.0.1", 8765),
        "client": ("127.0.0.1", 50000),
    }  # fmt: skip
    sent = False
    status = 0
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    return status, b"".join(chunks).decode()


def app_for(allow_writes: bool) -> tuple[Any, str]:
    ui = UI(cast(Any, None), allow_writes=allow_writes)
    return ui.app(), ui.token


async def test_read_only_refuses_every_write() -> None:
    app, token = app_for(False)
    form = urlencode({"token": token, "coordinates": "events/0/1"}).encode()
    status, text = await call(app, "POST", "/dead-letters/redrive", body=form)
    assert status == 403 and "--allow-writes" in text
    form = urlencode({"token": token, "app": "a", "user": "u", "id": "s"}).encode()
    assert (await call(app, "POST", "/session/delete", body=form))[0] == 403


async def test_writes_need_post_the_token_and_the_same_origin() -> None:
    app, token = app_for(True)
    assert (await call(app, "GET", "/dead-letters/redrive", query="coordinates=events/0/1"))[0] == 405
    assert (await call(app, "GET", "/session/delete", query="app=a&user=u&id=s"))[0] == 405
    stale = urlencode({"token": "guess", "coordinates": "events/0/1"}).encode()
    status, text = await call(app, "POST", "/dead-letters/redrive", body=stale)
    assert status == 403 and "token" in text
    good = urlencode({"token": token, "coordinates": "events/0/1"}).encode()
    status, text = await call(app, "POST", "/dead-letters/redrive", body=good,
                              headers={"origin": "http://evil.example"})  # fmt: skip
    assert status == 403 and "cross-origin" in text
    bad = urlencode({"token": token, "coordinates": "not coordinates"}).encode()
    status, text = await call(app, "POST", "/dead-letters/redrive", body=bad,
                              headers={"origin": "http://127.0.0.1:8765"})  # fmt: skip
    assert status == 400 and "TOPIC:PARTITION:OFFSET" in text


async def test_the_access_log_names_query_parameters_but_never_their_values(caplog: pytest.LogCaptureFixture) -> None:
    app, _ = app_for(False)
    caplog.set_level(logging.INFO, logger="distill.ui.access")
    secret = "PNR-X7Q2LM 护照号码"
    await call(app, "GET", "/recall", query=urlencode({"app": "a", "user": "u", "id": "s", "query": secret}))
    lines = [r.getMessage() for r in caplog.records if r.name == "distill.ui.access"]
    assert len(lines) == 1 and lines[0].startswith("GET /recall ?app,id,query,user ")
    assert "X7Q2LM" not in lines[0] and "护照" not in lines[0]


async def test_a_missing_session_key_is_a_clear_400() -> None:
    app, _ = app_for(False)
    status, text = await call(app, "GET", "/session", query="app=a")
    assert status == 400 and "app, user and id are required" in text
