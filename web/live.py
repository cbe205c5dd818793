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
sends ``end``; ``.../log/<path>`` serves a file of the build's log folder
(the folder a build's ``log_url`` names: ``job-output.txt``, and
``zuul-info/inventory.yaml``, made from the history when the folder holds
none). When ``<log dir>/<uuid>/`` has no log, the folder the
build's history row records (``log_url``) is read, if it lies under the log
dir. A web instance reads logs from its own filesystem: with executors on
other hosts, give every web instance the executors' log folders (a shared
mount at its ``<state_dir>/logs``), or run a web instance on each executor
host and send log requests there (docs/web.md).

A job writes in its log folder, so a file of it is opened as hostile (:func:`open_log`):
every folder under the log dir is opened with ``O_NOFOLLOW`` from its
parent's descriptor, and the log itself with ``O_NOFOLLOW | O_NONBLOCK``
and served only if ``fstat`` says it is a regular file. A symbolic link
anywhere under the log dir, a FIFO, a device, a socket or a folder is
answered with 404 (and logged), never followed, read or waited on.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import stat
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from web.context import WebContext
from web.endpoints import UUID, Call, Param
from web.errors import ApiError
from web.rest import API, T, build_row, status_document, tenant_of

log = logging.getLogger(__name__)

STATUS_INTERVAL = 1.0
LOG_INTERVAL = 0.5
HEARTBEAT = 15.0
CHUNK = 256 * 1024
LOG_NAME = "job-output.txt"
# a folder or file name the web opens under the log dir
SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._@+-]{0,254}")


async def _events(request: Request, produce: Any, until: float | None) -> AsyncIterator[str]:
    """Server-sent events from ``produce`` until it ends, the client leaves, or ``until``
    (the expiry of the token that opened the stream) passes."""
    quiet = 0.0
    async for event, data, wait in produce:
        if await request.is_disconnected():
            return
        if until is not None and time.time() >= until:
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


def _sse(call: Call, produce: Any) -> StreamingResponse:
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    until = _expiry(call.claims)
    return StreamingResponse(
        _events(call.request, produce, until), media_type="text/event-stream", headers=headers
    )


def _expiry(claims: Mapping[str, Any]) -> float | None:
    try:
        return float(claims["exp"])
    except (KeyError, TypeError, ValueError):
        return None


@API.get(T + "/status/events", media_type="text/event-stream")
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

    return _sse(call, produce())


# -- logs ---------------------------------------------------------------------


def _build_row(ctx: WebContext, tenant: str, uuid: str) -> Any:
    return build_row(ctx, tenant, uuid)


class LogRefusedError(Exception):
    """A build's log is not a plain file under the log dir (a link, a FIFO, outside...)."""


def _log_folders(log_dir: Path, row: Any) -> Iterator[tuple[str, ...]]:
    """Where the build's log folder may be, as names under ``log_dir``: ``<uuid>``,
    then the folder its row records (``log_url``; LogRefusedError for one outside)."""
    uuid = str(row["uuid"])
    if SAFE_NAME.fullmatch(uuid):
        yield (uuid,)
    stored = str(row["log_url"] or "")
    if not stored or "://" in stored:
        return
    # the executor records the log file; older rows the folder
    folder = Path(os.path.normpath(stored))
    if folder.name == LOG_NAME:
        folder = folder.parent
    try:
        parts = folder.relative_to(os.path.normpath(log_dir)).parts
    except ValueError:
        raise LogRefusedError(f"recorded log folder {stored!r} is outside {log_dir}") from None
    if not parts or not all(SAFE_NAME.fullmatch(p) for p in parts):
        raise LogRefusedError(f"recorded log folder {stored!r} is not a build's folder")
    yield parts


def _open_under(root: Path, names: Sequence[str]) -> int | None:
    """A descriptor of the regular file ``root/names...``, None when something is missing.

    ``root`` (the configured log dir) is opened as configured; each name under it
    with ``O_NOFOLLOW`` from its parent's descriptor, so no link is followed.
    """
    try:
        parent = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        for name in names[:-1]:
            flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
            folder = _open_at(name, flags, parent)
            if folder is None:
                return None
            os.close(parent)
            parent = folder
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
        fd = _open_at(names[-1], flags, parent)
    finally:
        os.close(parent)
    if fd is None:
        return None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise LogRefusedError(f"{'/'.join(names)} is not a regular file (mode {mode:o})")
    return fd


def _open_at(name: str, flags: int, parent: int) -> int | None:
    try:
        return os.open(name, flags, dir_fd=parent)
    except FileNotFoundError:
        return None
    except OSError as exc:  # a link (ELOOP, or ENOTDIR as a folder), a file as a folder, a socket
        try:
            link = stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
        except OSError:
            link = False
        raise LogRefusedError(f"{name}: {'a symbolic link' if link else exc.strerror}") from None


def open_log(ctx: WebContext, row: Any, names: Sequence[str] = (LOG_NAME,)) -> int | None:
    """A descriptor of a file of the build's log folder (``job-output.txt`` by default;
    a regular file under the log dir), None while there is none; ApiError 404 (logged)
    when it is refused."""
    log_dir = ctx.settings.log_dir
    try:
        for folder in _log_folders(log_dir, row):
            fd = _open_under(log_dir, (*folder, *names))
            if fd is not None:
                return fd
    except LogRefusedError as exc:
        log.warning("build %s: log refused: %s", row["uuid"], exc)
        raise ApiError(404, f"build {row['uuid']}: no log to serve", "uuid") from None
    return None


def read_log(ctx: WebContext, row: Any, offset: int, limit: int) -> bytes:
    """At most ``limit`` bytes of the build's log from ``offset`` (b"" while it has none)."""
    fd = open_log(ctx, row)
    if fd is None:
        return b""
    try:
        return os.pread(fd, limit, offset)
    finally:
        os.close(fd)


LOG_PARAMS = (
    Param("offset", int, minimum=0, maximum=2**40),
    Param("limit", int, minimum=1, maximum=CHUNK * 16),
)


@API.get(
    T + "/build/{uuid}/log",
    path_params=(Param("uuid", pattern=UUID),),
    query=LOG_PARAMS,
    media_type="text/plain",
)
def build_log(call: Call) -> Any:
    """The build's log from ``offset`` (text; the next offset in ``X-Log-Offset``)."""
    ctx, tenant = tenant_of(call)
    row = _build_row(ctx, tenant, call["uuid"])
    offset = call.get("offset", 0)
    data = read_log(ctx, row, offset, call.get("limit", CHUNK * 16))
    headers = {
        "X-Log-Offset": str(offset + len(data)),
        "X-Build-Finished": "true" if row["end_time"] else "false",
    }
    return Response(data, media_type="text/plain; charset=utf-8", headers=headers)


@API.get(
    T + "/build/{uuid}/log/stream",
    path_params=(Param("uuid", pattern=UUID),),
    media_type="text/event-stream",
)
def build_log_stream(call: Call) -> Any:
    """The build's log as it grows (server-sent ``log`` events, then ``end``)."""
    ctx, tenant = tenant_of(call)
    uuid = call["uuid"]
    read_log(ctx, _build_row(ctx, tenant, uuid), 0, 0)  # a refused log is a 404 now

    async def produce() -> AsyncIterator[tuple[str | None, Any, float]]:
        offset = 0
        while True:
            row = await run_in_threadpool(_build_row, ctx, tenant, uuid)
            try:
                data = await run_in_threadpool(read_log, ctx, row, offset, CHUNK)
            except ApiError:  # became a link or a FIFO while streamed (logged): the end
                return
            offset += len(data)
            if data:
                text = data.decode("utf-8", "replace")
                yield "log", {"offset": offset, "text": text}, 0.0 if len(data) == CHUNK else 0.1
            elif row["end_time"]:
                yield "end", {"offset": offset, "result": row["result"]}, 0.0
                return
            else:
                yield None, None, LOG_INTERVAL

    return _sse(call, produce())


# A file of the build's log folder, at the folder URL a build's ``log_url`` gives
# (``.../build/<uuid>/log/<path>``): a path of safe names, no "..", at most 16 deep.
LOG_FILE = rf"(?:{SAFE_NAME.pattern}/){{0,15}}{SAFE_NAME.pattern}"
INVENTORY = ("zuul-info", "inventory.yaml")
TEXT_SUFFIXES = (".txt", ".log", ".yaml", ".yml", ".json")


def inventory_of(row: Mapping[str, Any]) -> bytes:
    """The build's ``zuul-info/inventory.yaml`` when its folder holds none: Zuul's
    inventory shape (``all.hosts``, ``all.vars.zuul``) from what the history knows."""
    zuul = {
        "build": row["uuid"],
        "buildset": row["buildset"],
        "job": row["job"],
        "attempts": row["attempt"],
        "voting": row["voting"],
        "tenant": row["tenant"],
        "pipeline": row["pipeline"],
        "project": {"name": row["project"], "short_name": str(row["project"]).rsplit("/")[-1]},
        "branch": row["branch"],
        "ref": row["ref"],
        "newrev": row["newrev"],
        "executor": {"hostname": row["executor"]},
    }
    document = {"all": {"hosts": {}, "vars": {"zuul": zuul}}}
    return yaml.safe_dump(document, sort_keys=False).encode()


def _chunks(fd: int) -> Iterator[bytes]:
    try:
        while chunk := os.read(fd, CHUNK):
            yield chunk
    finally:
        os.close(fd)


@API.get(
    T + "/build/{uuid}/log/{path:path}",
    path_params=(Param("uuid", pattern=UUID), Param("path", pattern=LOG_FILE)),
    media_type="text/plain",
)
def build_log_file(call: Call) -> Any:
    """A file of the build's log folder (``job-output.txt``, ``zuul-info/inventory.yaml``)."""
    ctx, tenant = tenant_of(call)
    row = _build_row(ctx, tenant, call["uuid"])
    names = tuple(call["path"].split("/"))
    fd = open_log(ctx, row, names)
    text = names[-1].endswith(TEXT_SUFFIXES)
    headers = {"X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"}
    kind = "text/plain; charset=utf-8" if text else "application/octet-stream"
    if fd is None:
        if names == INVENTORY:
            return Response(inventory_of(row), media_type=kind, headers=headers)
        raise ApiError(404, f"build {row['uuid']} has no log file {call['path']!r}", "path")
    return StreamingResponse(_chunks(fd), media_type=kind, headers=headers)
