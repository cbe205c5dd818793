"""Request bodies, read as hostile input: bounded while they stream, JSON of bounded depth.

Every body is read from the ASGI stream chunk by chunk (:func:`chunks`) and
refused with 413 as soon as it passes its endpoint's limit, or at once when
its ``Content-Length`` already says it is too big; nothing reads a whole
body before counting it. :class:`CloseUnread` closes the connection after
any answer given while the client still had body to send (a 401 before an
upload, a 413 in the middle of one), so a refused upload ends there instead
of being drained.

:func:`parse_json` parses a JSON body whose nesting is at most
:data:`MAX_DEPTH` deep; anything else, however malformed, is a 400 that
says why (never a ``RecursionError``).
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from web.errors import ApiError

MAX_DEPTH = 64

# a JSON string (escapes included) or a bracket: brackets inside strings do not nest
_TOKENS = re.compile(rb'"(?:[^"\\]++|\\.)*+"|[\[\]{}]')
_OPENING = frozenset(b"[{")


def declared_length(request: Request) -> int | None:
    """The body's ``Content-Length`` (None when chunked or absent); 400 if not a number."""
    raw = request.headers.get("content-length")
    if raw is None:
        return None
    if not raw.isdigit():
        raise ApiError(400, "Content-Length is not a number")
    return int(raw)


async def chunks(request: Request, limit: int, what: str = "request body") -> AsyncIterator[bytes]:
    """The body's chunks as they arrive; ApiError 413 once it passes ``limit`` bytes."""
    declared = declared_length(request)
    if declared is not None and declared > limit:
        raise ApiError(413, f"{what} larger than {limit} bytes")
    seen = 0
    async for chunk in request.stream():
        seen += len(chunk)
        if seen > limit:
            raise ApiError(413, f"{what} larger than {limit} bytes")
        if chunk:
            yield chunk


async def read_body(request: Request, limit: int, what: str = "request body") -> bytes:
    """The whole body, at most ``limit`` bytes (ApiError 413 as soon as it is more)."""
    parts = [chunk async for chunk in chunks(request, limit, what)]
    return b"".join(parts)


def too_deep(raw: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether the JSON text ``raw`` nests arrays and objects more than ``limit`` deep."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    depth = 0
    for match in _TOKENS.finditer(raw):
        byte = raw[match.start()]
        if byte in _OPENING:
            depth += 1
            if depth > limit:
                return True
        elif byte != 0x22:  # a closing bracket; a string (0x22 is '"') counts nothing
            depth -= 1
    return False


def parse_json(raw: bytes, what: str = "request body") -> Any:
    """``raw`` parsed; ApiError 400 naming what is wrong when it is not JSON of sane depth."""
    if too_deep(raw):
        raise ApiError(400, f"{what}: JSON nested deeper than {MAX_DEPTH} levels")
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ApiError(400, f"{what}: not valid JSON ({exc.msg} at byte {exc.pos})") from None
    except UnicodeDecodeError as exc:
        raise ApiError(400, f"{what}: not valid JSON (not UTF-8 at byte {exc.start})") from None
    except (ValueError, RecursionError) as exc:  # a number of 4300 digits and more, say
        reason = str(exc).split(";")[0][:120]
        raise ApiError(400, f"{what}: not valid JSON ({reason})") from None


def _has_body(scope: Scope) -> bool:
    for name, value in scope.get("headers", ()):
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() != b"0"):
            return True
    return False


class CloseUnread:
    """ASGI middleware: an answer given before the request's body was all read closes
    the connection (``Connection: close``), so the rest of a refused upload is never read."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _has_body(scope):
            await self.app(scope, receive, send)
            return
        finished = False

        async def tracked_receive() -> Message:
            nonlocal finished
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                finished = True
            return message

        async def tracked_send(message: Message) -> None:
            if message["type"] == "http.response.start" and not finished:
                headers = [h for h in message.get("headers", ()) if h[0].lower() != b"connection"]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        await self.app(scope, tracked_receive, tracked_send)
