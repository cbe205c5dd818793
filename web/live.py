"""Live things over HTTP: the status as server-sent events, build logs by offset and streamed.

**Status events** (``/api/tenant/<t>/status/events``): one ``status`` event
with the whole status document whenever it changed (checked every
``STATUS_INTERVAL`` seconds), and a comment line as heartbeat; the page
replaces what it shows, no reload.

**Logs.** An executor writes a build's ``job-output.txt`` under
``<state_dir>/logs/<build uuid>/`` as the job runs. ``.../build/<uuid>/log``
returns the bytes from ``offset`` (and the next offset in
``X-Log-Offset``); ``.../log/stream`` follows the file as server-sent
``log`` events until the build has finished and every byte was sent, then
sends ``end``. A finished build's log is read from the folder its history
row records (``log_url``). A web instance reads logs from its own
filesystem: with executors on other hosts, give every web instance the
executors' log folders (a shared mount of ``<state_dir>/logs``), or run a
web instance on each executor host and send log requests there
(docs/web.md).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from web.context import WebContext
from web.endpoints import UUID, Call, Param
from web.rest import API, T, build_row, status_document, tenant_of

STATUS_INTERVAL = 1.0
LOG_INTERVAL = 0.5
HEARTBEAT = 15.0
CHUNK = 256 * 1024


async def _events(request: Request, produce: Any) -> AsyncIterator[str]:
    """Server-sent events from ``produce`` until it ends or the client leaves."""
    quiet = 0.0
    async for event, data, wait in produce:
        if await request.is_disconnected():
            return
        if event is not None:
            yield f"event: {event}\ndata: {json.dumps(data)}\n\n"
            quiet = 0.0
        else:
            quiet += wait
            if quiet >= HEARTBEAT:
                yield ": heartbeat\n\n"
                quiet = 0.0
        await asyncio.sleep(wait)


def _sse(request: Request, produce: Any) -> StreamingResponse:
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(
        _events(request, produce), media_type="text/event-stream", headers=headers
    )


@API.get(T + "/status/events")
def status_events(call: Call) -> Any:
    """The tenant's status as server-sent events (``status``), sent when it changes."""
    ctx, tenant = tenant_of(call)

    async def produce() -> AsyncIterator[tuple[str | None, Any, float]]:
        last = ""
        while True:
            try:
                document = await run_in_threadpool(status_document, ctx, tenant)
            except Exception as exc:  # ZooKeeper away: say so, keep the stream
                yield "problem", {"error": str(exc)}, STATUS_INTERVAL * 5
                continue
            text = json.dumps({k: v for k, v in document.items() if k != "now"}, sort_keys=True)
            if text != last:
                last = text
                yield "status", document, STATUS_INTERVAL
            else:
                yield None, None, STATUS_INTERVAL

    return _sse(call.request, produce())


# -- logs ---------------------------------------------------------------------


def _build_row(ctx: WebContext, tenant: str, uuid: str) -> Any:
    return build_row(ctx, tenant, uuid)


def log_file(ctx: WebContext, row: Any) -> Path:
    """Where this instance finds the build's ``job-output.txt``."""
    local: Path = ctx.settings.log_dir / str(row["uuid"]) / "job-output.txt"
    stored = str(row["log_url"] or "")
    if local.is_file() or not stored or "://" in stored:
        return local
    return Path(stored) / "job-output.txt"


def _read(path: Path, offset: int, limit: int) -> bytes:
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            return handle.read(limit)
    except FileNotFoundError:
        return b""


LOG_PARAMS = (
    Param("offset", int, minimum=0, maximum=2**40),
    Param("limit", int, minimum=1, maximum=CHUNK * 16),
)


@API.get(T + "/build/{uuid}/log", path_params=(Param("uuid", pattern=UUID),), query=LOG_PARAMS)
def build_log(call: Call) -> Any:
    """The build's log from ``offset`` (text; the next offset in ``X-Log-Offset``)."""
    ctx, tenant = tenant_of(call)
    row = _build_row(ctx, tenant, call["uuid"])
    offset = call.get("offset", 0)
    data = _read(log_file(ctx, row), offset, call.get("limit", CHUNK * 16))
    headers = {
        "X-Log-Offset": str(offset + len(data)),
        "X-Build-Finished": "true" if row["end_time"] else "false",
    }
    return Response(data, media_type="text/plain; charset=utf-8", headers=headers)


@API.get(T + "/build/{uuid}/log/stream", path_params=(Param("uuid", pattern=UUID),))
def build_log_stream(call: Call) -> Any:
    """The build's log as it grows (server-sent ``log`` events, then ``end``)."""
    ctx, tenant = tenant_of(call)
    uuid = call["uuid"]
    _build_row(ctx, tenant, uuid)

    async def produce() -> AsyncIterator[tuple[str | None, Any, float]]:
        offset = 0
        while True:
            row = await run_in_threadpool(_build_row, ctx, tenant, uuid)
            data = await run_in_threadpool(_read, log_file(ctx, row), offset, CHUNK)
            offset += len(data)
            if data:
                text = data.decode("utf-8", "replace")
                yield "log", {"offset": offset, "text": text}, 0.0 if len(data) == CHUNK else 0.1
            elif row["end_time"]:
                yield "end", {"offset": offset, "result": row["result"]}, 0.0
                return
            else:
                yield None, None, LOG_INTERVAL

    return _sse(call.request, produce())
