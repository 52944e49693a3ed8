"""The Starlette app of ``distill ui``: thin routes over ``Sources`` and the view models.

Read-only unless built with ``allow_writes``: the two writes (redrive a dead
letter, delete a session) are POST-only, need the per-process form token and
a same-origin request, and answer 403 otherwise. The access log names the
method, path, status and duration, and only the *names* of query parameters:
search text and event content never reach it.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.datastructures import FormData, QueryParams
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from schemas import SessionKey
from streams.context.recall_tools import SCOPES, SESSION_LOAD, SESSION_SEARCH
from streams.rules.dead_letters import format_refusal, parse_offset
from streams.ui import views
from streams.ui.sources import Sources, now

HERE = Path(__file__).parent
access_log = logging.getLogger("distill.ui.access")
log = logging.getLogger("distill.ui")


class AccessLog:
    """ASGI middleware: one INFO line per request without query values (they may hold search text)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = [500]

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            names = sorted(set(QueryParams(scope.get("query_string", b"").decode("latin-1")).keys()))
            access_log.info(
                "%s %s%s %d %.0fms", scope["method"], scope["path"], f" ?{','.join(names)}" if names else "",
                status[0], (time.perf_counter() - started) * 1000,
            )  # fmt: skip


def _dt(value: datetime | None) -> str:
    if value is None:
        return "—"
    return value.strftime("%Y-%m-%d %H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def _size(n: int | None) -> str:
    if n is None:
        return "—"
    if n < 1024:
        return f"{n} B"
    return f"{n / 1024:.1f} KiB" if n < 1024 * 1024 else f"{n / 1024 / 1024:.1f} MiB"


def _key_label(filter_key: str) -> str:
    return filter_key or "full session"


def _short_label(filter_key: str) -> str:
    """The last segment of a branch key (column headers are narrow; the full key is the title)."""
    return filter_key.rsplit("/", 1)[-1] if filter_key else "full session"


class UI:
    """Routes and rendering; ``sources`` is opened by the caller (the CLI) and shared by every request."""

    def __init__(self, sources: Sources, *, allow_writes: bool = False) -> None:
        self.sources = sources
        self.allow_writes = allow_writes
        self.token = secrets.token_urlsafe(32)
        self.env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"]))
        self.env.filters.update(dt=_dt, size=_size, key_label=_key_label, short_label=_short_label)
        self.env.globals.update(urlencode=urlencode, scopes=SCOPES)

    # -- plumbing --------------------------------------------------------------------------------------------

    def render(self, request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        template = self.env.get_template(name)
        html = template.render(request=request, allow_writes=self.allow_writes, token=self.token, **context)
        return HTMLResponse(html, status_code=status)

    @staticmethod
    def session_key(params: Any) -> SessionKey:
        app, user, sid = (str(params.get(n) or "").strip() for n in ("app", "user", "id"))
        if not (app and user and sid):
            raise HTTPException(400, "app, user and id are required")
        return SessionKey(app, user, sid)

    async def write_form(self, request: Request) -> FormData:
        """The form of a write request, once the write is allowed, same-origin and carries the token."""
        if not self.allow_writes:
            raise HTTPException(403, "writes are disabled: start `distill ui --allow-writes` to redrive or delete")
        origin = request.headers.get("origin") or request.headers.get("referer")
        if origin and urlsplit(origin).netloc != request.headers.get("host", ""):
            raise HTTPException(403, "cross-origin write refused")
        form = await request.form()
        if not hmac.compare_digest(str(form.get("token") or ""), self.token):
            raise HTTPException(403, "missing or stale form token: reload the page and try again")
        return form

    async def on_error(self, request: Request, exc: Exception) -> Response:
        if isinstance(exc, HTTPException):
            return self.render(request, "error.html", exc.status_code, title=f"{exc.status_code}", message=exc.detail)
        log.warning("request failed: %s", type(exc).__name__)
        return self.render(request, "error.html", 503, title="unavailable", message=f"{type(exc).__name__}: {exc}")

    # -- pages -----------------------------------------------------------------------------------------------

    async def sessions(self, request: Request) -> Response:
        query = request.query_params.get("q", "")
        keys, capped = await self.sources.catalog.session_keys()
        matching = [k for k in keys if views.key_matches(k, query)]
        shown = matching[: views.MAX_LISTED_SESSIONS]
        overviews = await self.sources.catalog.overviews(shown)
        return self.render(
            request, "sessions.html", title="Sessions", query=query, groups=views.group_sessions(overviews),
            total=len(keys), matching=len(matching), shown=len(shown), capped=capped,
        )  # fmt: skip

    async def session(self, request: Request) -> Response:
        key = self.session_key(request.query_params)
        boundaries, events, stats = await self._gather(
            self.sources.boundaries(key), self.sources.events(key), self.sources.reader.session_stats(key)
        )
        timeline = views.build_timeline(events, boundaries)
        latest = {s.filter_key: s for s in await self.sources.reader.list_summaries(key)}
        after = {}
        for b in boundaries:
            after[b.filter_key] = await self.sources.after_boundary(key, b.filter_key, latest[b.filter_key])
        return self.render(
            request, "session.html", title=key.session_id, key=key, timeline=timeline, stats=stats, after=after,
            qs=self._qs(key),
        )  # fmt: skip

    async def summary(self, request: Request) -> Response:
        key = self.session_key(request.query_params)
        filter_key = request.query_params.get("key", "")
        history = await self.sources.history(key, filter_key)
        if not history:
            raise HTTPException(404, f"no summary of {_key_label(filter_key)!r} in this session")
        shown, against = views.pick_versions(history, _int(request, "v"), _int(request, "vs"))
        assert shown is not None
        record = shown.record
        cut, previous, events = await self._gather(
            self.sources.cut_of(key, record.boundary), self.sources.cut_of(key, record.previous_boundary),
            self.sources.events(key),
        )  # fmt: skip
        return self.render(
            request, "summary.html", title=f"{_key_label(filter_key)} v{shown.version}", key=key,
            filter_key=filter_key, shown=shown, against=against, versions=views.version_rows(history),
            diff=views.version_diff(shown, against), report=views.report_view(record),
            covered=views.covered_window(events, filter_key, cut, previous), qs=self._qs(key),
        )  # fmt: skip

    async def recall(self, request: Request) -> Response:
        key = self.session_key(request.query_params)
        p = request.query_params
        filter_key = p.get("key", "")
        tool = p.get("tool", SESSION_SEARCH)
        args: dict[str, Any]
        if tool == SESSION_LOAD:
            args = {n: p[n] for n in ("event_id", "tool_call_id", "session_id") if p.get(n)}
            args |= {n: int(p[n]) for n in ("before", "after", "content_offset", "content_limit") if _digits(p.get(n))}
        elif tool == SESSION_SEARCH:
            args = {"query": p.get("query", ""), "scope": p.get("scope", "current_hidden")}
            if _digits(p.get("top_k")):
                args["top_k"] = int(p["top_k"])
            if p.get("search_mode"):
                args["search_mode"] = p["search_mode"]
        else:
            raise HTTPException(400, f"unknown tool {tool!r}: session_search or session_load")
        body, keys = await self._gather(self.sources.recall(key, filter_key, tool, args), self.sources.boundaries(key))
        return self.render(
            request, "recall.html", title=tool, key=key, filter_key=filter_key, tool=tool, args=args,
            result=views.recall_view(tool, body), qs=self._qs(key), keys=keys,
        )  # fmt: skip

    async def dead_letters(self, request: Request) -> Response:
        reason = request.query_params.get("reason", "")
        error_class = request.query_params.get("error_class", "")
        letters, invalid = await self.sources.dead_letters()
        chosen = views.filter_letters(letters, reason=reason, error_class=error_class)
        return self.render(
            request, "dead_letters.html", title="Dead letters", reason=reason, error_class=error_class,
            classes=views.class_counts(letters), rows=views.letter_rows(chosen), total=len(letters), invalid=invalid,
            notice=request.query_params.get("notice", ""),
        )  # fmt: skip

    async def redrive(self, request: Request) -> Response:
        form = await self.write_form(request)
        try:
            coordinates = parse_offset(str(form.get("coordinates") or ""))
        except ValueError as exc:
            raise HTTPException(400, str(exc)) from None
        plan, landed = await self.sources.redrive(coordinates)
        t = self.sources.settings.topics
        if plan.foreign:
            notice = format_refusal(plan.foreign, (t.events, t.summaries))
        elif landed:
            notice = "; ".join(f"redriven {coordinates} → {topic}/{part}/{off}" for topic, part, off in landed)
        elif plan.skipped:
            notice = f"not redriven {coordinates}: {plan.skipped[0][1]}"
        else:
            notice = f"no dead letter for {coordinates}"
        log.info("redrive", extra={"coordinates": str(coordinates), "published": len(landed)})
        return RedirectResponse("/dead-letters?" + urlencode({"notice": notice}), status_code=303)

    async def delete(self, request: Request) -> Response:
        form = await self.write_form(request)
        key = self.session_key(form)
        partition, offset = await self.sources.delete_session(key)
        log.info("delete_session", extra={"session_id": key.session_id, "partition": partition, "offset": offset})
        return self.render(
            request, "error.html", title="deleted",
            message=f"delete_session for {key.app_name}/{key.user_id}/{key.session_id} published "
                    f"(partition {partition}, offset {offset}); the projector removes the rows shortly.",
        )  # fmt: skip

    async def ops(self, request: Request) -> Response:
        errors: dict[str, str] = {}
        lags: list[views.LagRow] = []
        jobs: list[views.JobRow] = []
        bad_states, truncated = 0, False
        try:
            committed, ends = await self.sources.kafka_offsets()
            projector = await self.sources.catalog.projector_offsets()
            lags = views.lag_rows(committed, ends, projector)
        except Exception as exc:  # one panel fails, the page still renders
            errors["lag"] = f"{type(exc).__name__}: {exc}"
        try:
            states, bad_states, truncated = await self.sources.trigger_states()
            jobs = views.job_rows(states, now())
        except Exception as exc:
            errors["jobs"] = f"{type(exc).__name__}: {exc}"
        return self.render(
            request, "ops.html", title="Consumers & jobs", lags=lags, jobs=jobs, bad_states=bad_states,
            truncated=truncated, gauge=self.sources.jobs_gauge(), errors=errors,
        )  # fmt: skip

    # -- helpers -----------------------------------------------------------------------------------------------

    @staticmethod
    def _qs(key: SessionKey) -> Callable[..., str]:
        def qs(**extra: Any) -> str:
            return urlencode({"app": key.app_name, "user": key.user_id, "id": key.session_id, **extra})

        return qs

    @staticmethod
    async def _gather(*aws: Awaitable[Any]) -> Any:
        import asyncio

        return await asyncio.gather(*aws)

    def guarded(self, endpoint: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        """``endpoint`` answering a failure of its sources (Cassandra, Kafka) with an error page, not a 500."""

        async def run(request: Request) -> Response:
            try:
                return await endpoint(request)
            except HTTPException:
                raise
            except Exception as exc:
                return await self.on_error(request, exc)

        return run

    def app(self) -> Starlette:
        pages: list[tuple[str, Callable[[Request], Awaitable[Response]], list[str]]] = [
            ("/", self.sessions, ["GET"]),
            ("/session", self.session, ["GET"]),
            ("/summary", self.summary, ["GET"]),
            ("/recall", self.recall, ["GET"]),
            ("/dead-letters", self.dead_letters, ["GET"]),
            ("/dead-letters/redrive", self.redrive, ["POST"]),
            ("/session/delete", self.delete, ["POST"]),
            ("/ops", self.ops, ["GET"]),
        ]
        routes: list[Route | Mount] = [Route(path, self.guarded(fn), methods=m) for path, fn, m in pages]
        routes.append(Mount("/static", StaticFiles(directory=HERE / "static"), name="static"))
        app = Starlette(routes=routes, exception_handlers={HTTPException: self.on_error})
        app.add_middleware(AccessLog)
        return app


def _digits(value: str | None) -> bool:
    return bool(value) and str(value).strip().isdigit()


def _int(request: Request, name: str) -> int | None:
    value = request.query_params.get(name)
    return int(value) if value is not None and _digits(value) else None


def create_app(sources: Sources, *, allow_writes: bool = False) -> Starlette:
    """The ASGI app over ``sources`` (read-only unless ``allow_writes``)."""
    return UI(sources, allow_writes=allow_writes).app()
