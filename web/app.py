"""The web application: REST API, status pages, health and metrics in one Starlette app.

Starlette rather than FastAPI: the API is Zuul's JSON, shaped by hand, so
FastAPI's models would be a second description of it; Starlette is already
what Flower's neighbours and uvicorn speak, has no dependency beyond
anyio, and the one table of endpoints (:mod:`web.endpoints`) gives the
parameter checks and the OpenAPI document that FastAPI would have given.
uvicorn serves it (``sluice web``).
"""

from __future__ import annotations

import asyncio
from importlib import resources
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

import web.admin
import web.events
import web.jobgraph
import web.live
import web.nodes
import web.resources  # noqa: F401 (each registers its endpoints)
from scheduler.settings.sections import Settings
from web import hooks
from web.auth import ALL
from web.bodies import CloseUnread
from web.context import WebContext
from web.errors import ApiError, error_response
from web.rest import API

VERSION = "0.1.0"


def _page() -> str:
    return (resources.files("web") / "static" / "index.html").read_text()


async def page(request: Request) -> Response:
    return HTMLResponse(_page())


async def home(request: Request) -> Response:
    return RedirectResponse("/tenants")


async def health(request: Request) -> Response:
    ctx: WebContext = request.app.state.context
    try:
        checks = await asyncio.wait_for(run_in_threadpool(ctx.health), timeout=10)
    except TimeoutError:
        checks = {"zookeeper": "error: no answer in 10 s", "broker": "unknown"}
    ok = all(v == "ok" for v in checks.values())
    return JSONResponse({"status": "ok" if ok else "unhealthy", **checks}, 200 if ok else 503)


async def metrics(request: Request) -> Response:
    """Prometheus metrics; with ``protect_reads``, for a token naming every tenant ("*")."""
    from scheduler.metrics import registry

    ctx: WebContext = request.app.state.context
    if ctx.settings.web.protect_reads:
        try:
            await run_in_threadpool(ctx.auth.authorize, request, ALL, False)
        except ApiError as exc:
            return error_response(exc)

    def collect() -> bytes:
        try:
            engine: Any = ctx.engine
        except Exception:  # history down: the ZooKeeper metrics still count
            engine = None
        return bytes(generate_latest(registry(ctx.client, engine)))

    return Response(await run_in_threadpool(collect), media_type=CONTENT_TYPE_LATEST)


async def openapi(request: Request) -> Response:
    return JSONResponse(API.openapi("Sluice REST API (Zuul-compatible)", VERSION))


async def not_found(request: Request, exc: Exception) -> Response:
    if request.url.path.startswith("/api/"):
        return error_response(ApiError(404, f"no such endpoint: {request.url.path}"))
    return HTMLResponse(_page(), status_code=404)


async def method_not_allowed(request: Request, exc: Exception) -> Response:
    return error_response(ApiError(405, f"method {request.method} not allowed here"))


def create_app(settings: Settings) -> Starlette:
    """The app for ``settings``; ZooKeeper and SQL are reached on first use."""
    context = WebContext(settings)
    static = StaticFiles(directory=str(resources.files("web") / "static"))
    routes = [
        Route("/", home),
        Route("/health", health),
        Route("/metrics", metrics),
        Route("/api/openapi.json", openapi),
        Route("/api/connection/{connection}/payload", hooks.payload, methods=["POST"]),
        *API.routes(context.auth.authorize, settings.web.protect_reads),
        Mount("/static", static, name="static"),
        Route("/tenants", page),
        Route("/t/{tenant}/{rest:path}", page),
    ]
    app = Starlette(
        routes=routes,
        middleware=[Middleware(CloseUnread)],
        exception_handlers={404: not_found, 405: method_not_allowed},
    )
    app.state.context = context
    return app
