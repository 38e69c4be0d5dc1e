"""The inspector's routes: each page as HTML, and its data as JSON under ``/api/`` at the same path.

| page | what |
|---|---|
| ``/`` | the fleet: records, verified share, recent conclusions, the job's diagnoses and dead letters |
| ``/vehicles/{vin}`` | the vehicle's medical record: a timeline, and every record with its versions |
| ``/vehicles/{vin}/cases/{session_id}`` | one case: summary, omitted facts, stored source, fidelity findings |
| ``/vehicles/{vin}/recall?symptom=&codes=&at=&series=`` | what a session opening at ``at`` would be given, and why |

Links, forms and the stylesheet are relative (``root``: ``./``, ``../``, ...),
so that the pages work at the root of a host and under a path prefix a
reverse proxy takes off alike. Stored text reaches the pages through
``bidi`` (its reordering controls shown as escapes).

The routes only read. Around them (outermost first): security headers; GET
and HEAD only; an access log of method, path and status (never a query
string, which may carry the token); loopback hosts only when bound to
loopback; the token when there is one (``security``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import jinja2
from pydantic import SecretStr
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from inspector import bidi, views
from inspector.security import (
    ASGIApp,
    LocalHostOnly,
    Message,
    ReadOnlyMethods,
    Receive,
    Scope,
    Scrubber,
    SecurityHeaders,
    Send,
    TokenGuard,
)
from vdoctor.errors import StoreError, VDoctorError

log = logging.getLogger("inspector")
access_log = logging.getLogger("inspector.access")
# What a path's characters stay as in the access log; every other character is percent-encoded.
_LOGGED_PATH_SAFE = "/:@!$&'()*+,;=-._~"
_NO_SUCH_PATH = "no such path: the API's paths are the pages' under /api/ (/api/, /api/vehicles/{vin}, ...)"


def _when(value: str | None) -> str:
    """An ISO time as the pages show it: 2026-11-01 08:15."""
    return "-" if not value else value[:16].replace("T", " ")


def _segment(value: object) -> str:
    """A value as one segment of a link's path, percent-encoded: a "/", "?", "#" or a control in a stored id
    stays part of it."""
    return quote(str(value), safe="")


def _root(request: Request) -> str:
    """The way from the page back to the app's root, relative ("./", "../", ...): the same link works when
    a reverse proxy serves the app under a path prefix (and takes the prefix off before it asks)."""
    path = request.scope["path"]
    prefix = request.scope.get("root_path", "")
    if prefix and path.startswith(prefix):
        path = path[len(prefix) :]
    depth = path.count("/") - 1
    return "../" * depth if depth > 0 else "./"


def _templates() -> Jinja2Templates:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("inspector", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        # Every {{ }} goes through it: a bidirectional-text control in stored text is shown, never obeyed.
        finalize=bidi.marked,
    )
    env.filters["when"] = _when
    env.filters["plain"] = bidi.plain
    env.filters["segment"] = _segment
    env.filters["score"] = lambda v: "-" if v is None else f"{v:.3f}"
    env.filters["pct"] = lambda v: f"{100 * v:.1f}%"
    return Jinja2Templates(env=env)


Build = Callable[[views.Inspector, Request], dict[str, Any]]


class _Pages:
    def __init__(self, ins: views.Inspector, scrub: Scrubber) -> None:
        self.ins = ins
        self.scrub = scrub
        self.templates = _templates()

    def error(self, request: Request, status: int, message: str) -> Response:
        message = self.scrub(message)
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": message}, status_code=status)
        context = {"status": status, "message": message, "memory": self.ins.memory, "root": _root(request)}
        return self.templates.TemplateResponse(request, "error.html", context, status_code=status)

    def routes(self) -> list[BaseRoute]:
        pages: list[tuple[str, str, Build, Build]] = [
            ("/", "fleet.html", lambda i, r: views.fleet(i), lambda i, r: views.fleet(i)),
            ("/vehicles/{vin}", "vehicle.html", _vehicle, _vehicle),
            ("/vehicles/{vin}/cases/{session_id}", "case.html", _case, _case),
            ("/vehicles/{vin}/recall", "recall.html", _recall_page, _recall_api),
        ]
        routes: list[BaseRoute] = [Route("/vehicles", self._find, methods=["GET"])]
        for path, template, page, api in pages:
            routes.append(Route(path, self._html(template, page), methods=["GET"]))
            routes.append(Route("/api" + path, self._json(api), methods=["GET"]))
        routes.append(Mount("/static", StaticFiles(packages=[("inspector", "static")]), name="static"))
        return routes

    def _guarded(self, request: Request, build: Build) -> dict[str, Any] | Response:
        try:
            return build(self.ins, request)
        except views.Moved as moved:
            # Relative: the record's page beside this one, under whatever prefix this one was asked for.
            return RedirectResponse("./" + _segment(moved.session_id), status_code=307)
        except views.NotFound as e:
            return self.error(request, 404, str(e))
        except views.BadInput as e:
            return self.error(request, 400, str(e))
        except StoreError as e:
            log.warning("long-term memory could not be read: %s", self.scrub(str(e)))
            return self.error(request, 503, f"long-term memory could not be read: {e}")
        except VDoctorError as e:
            return self.error(request, 400, str(e))

    def _html(self, template: str, build: Build) -> Callable[[Request], Response]:
        def endpoint(request: Request) -> Response:
            data = self._guarded(request, build)
            if isinstance(data, Response):
                return data
            context = {"data": data, "memory": self.ins.memory, "root": _root(request)}
            return self.templates.TemplateResponse(request, template, context)

        return endpoint

    def _json(self, build: Build) -> Callable[[Request], Response]:
        def endpoint(request: Request) -> Response:
            data = self._guarded(request, build)
            return data if isinstance(data, Response) else JSONResponse(data)

        return endpoint

    def _find(self, request: Request) -> Response:
        """The fleet page's VIN box: on to the vehicle's page."""
        try:
            vin = views.check_vin(request.query_params.get("vin", ""))
        except views.NotFound as e:
            return self.error(request, 404, str(e))
        # Relative to /vehicles: the vehicle's page under whatever prefix the form was sent from.
        return RedirectResponse(f"vehicles/{vin}", status_code=303)


def _vehicle(ins: views.Inspector, r: Request) -> dict[str, Any]:
    return views.vehicle(ins, r.path_params["vin"])


def _case(ins: views.Inspector, r: Request) -> dict[str, Any]:
    return views.case(ins, r.path_params["vin"], r.path_params["session_id"])


def _recall_page(ins: views.Inspector, r: Request) -> dict[str, Any]:
    return views.recall(ins, r.path_params["vin"], dict(r.query_params), require_symptom=False)


def _recall_api(ins: views.Inspector, r: Request) -> dict[str, Any]:
    explained = views.recall(ins, r.path_params["vin"], dict(r.query_params), require_symptom=True)["explanation"]
    if not isinstance(explained, dict):
        raise views.BadInput("give symptom=<the alert text>")
    return explained


class AccessLog:
    """One line per request: method, path and status (the query string is left out: it may hold the token)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = [0]

        async def recording(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, recording)
        finally:
            elapsed = (time.perf_counter() - started) * 1000
            # The path as sent on the wire (percent-encoded): decoded, a "%0a" began a line of the attacker's
            # own in the log, and "%1b" wrote terminal escapes (found by an audit).
            path = quote(str(scope["path"]), safe=_LOGGED_PATH_SAFE)
            access_log.info("%s %s %d %.0f ms", scope["method"], path, status[0], elapsed)


def create_app(ins: views.Inspector, token: SecretStr | None, local: bool, scrub: Scrubber) -> ASGIApp:
    """The inspector as an ASGI app, behind its read-only and token guards."""
    pages = _Pages(ins, scrub)

    async def unexpected(request: Request, exc: Exception) -> Response:
        log.error("error answering %s %s: %s", request.method, request.url.path, scrub(repr(exc)))
        return pages.error(request, 500, "internal error (the inspector's log has it)")

    async def starlettes(request: Request, exc: Exception) -> Response:
        """Starlette's own errors (a path no route has): in JSON under ``/api/``, as every other answer there
        (an API client read a text 404); elsewhere as Starlette answers them."""
        if not isinstance(exc, HTTPException):
            return await unexpected(request, exc)
        if not request.url.path.startswith("/api/"):
            return PlainTextResponse(exc.detail, status_code=exc.status_code, headers=exc.headers)
        message = _NO_SUCH_PATH if exc.status_code == 404 else exc.detail
        return JSONResponse({"error": message}, status_code=exc.status_code, headers=exc.headers)

    handlers = {Exception: unexpected, HTTPException: starlettes}
    app: ASGIApp = Starlette(routes=pages.routes(), exception_handlers=handlers)
    if token is not None:
        app = TokenGuard(app, token)
    if local:
        app = LocalHostOnly(app)
    # The access log outermost: a request every guard refuses (a POST's 405, too) is logged as well.
    return AccessLog(SecurityHeaders(ReadOnlyMethods(app)))
