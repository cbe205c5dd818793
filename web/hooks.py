"""Webhooks in: ``POST /api/connection/<connection>/payload`` (Zuul's path).

Any web instance takes a delivery: it checks the signature, stores the
event in the connection's queue in ZooKeeper (:mod:`scheduler.drivers.webhooks`),
and only then answers 2xx and nudges the connection hop.

* **GitHub**: ``X-Hub-Signature-256`` is ``sha256=`` and the HMAC-SHA256 of
  the body under the connection's ``webhook_token``; ``X-GitHub-Event``
  names the event, ``X-GitHub-Delivery`` identifies the delivery.
* **GitLab**: ``X-Gitlab-Token`` equals the connection's ``webhook_token``;
  ``X-Gitlab-Event`` names the event, ``X-Gitlab-Event-UUID`` identifies it.

A missing or wrong signature is a 401 and nothing is stored; a body that is
not a JSON object (or nests deeper than :data:`web.bodies.MAX_DEPTH`) is a
400; an event type the driver does not use is acknowledged (202,
``ignored``) and not stored; a delivery id stored before is acknowledged
(200, ``duplicate``) and not stored again.

The signature is checked before the body is parsed, and whatever can be
checked without the body first: a connection without ``webhook_token``, a
GitHub delivery without ``X-Hub-Signature-256`` or a GitLab delivery with
the wrong ``X-Gitlab-Token`` is refused before a byte of the body is read.
A GitHub body is hashed as it streams in, into a spool that keeps at most
:data:`SPOOL_IN_MEMORY` bytes in memory (the rest in a temporary file), and
refused with 413 once it passes :data:`MAX_BODY`; only a body whose
signature matched is read back and parsed.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import tempfile
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from scheduler.drivers import webhooks
from scheduler.nudge import dispatch, task_names
from scheduler.settings.sections import ConnectionSettings
from web.bodies import chunks, parse_json
from web.errors import ApiError, error_response

log = logging.getLogger(__name__)

MAX_BODY = 10 * 1024 * 1024
SPOOL_IN_MEMORY = 256 * 1024
HEADERS = {
    "github": ("x-github-event", "x-github-delivery"),
    "gitlab": ("x-gitlab-event", "x-gitlab-event-uuid"),
}


def _same(given: str, expected: str) -> bool:
    """Constant-time comparison; a header may hold any latin-1 character."""
    return hmac.compare_digest(given.encode("latin-1", "replace"), expected.encode("utf-8"))


def _secret(connection: ConnectionSettings, request: Request) -> str:
    """The connection's secret, once what the headers alone can prove passed; 401 otherwise."""
    secret = str(connection.options.get("webhook_token") or "")
    if not secret:
        raise ApiError(401, f"connection {connection.name!r} has no webhook_token configured")
    if connection.driver == "github":
        if not request.headers.get("x-hub-signature-256", ""):
            raise ApiError(401, "X-Hub-Signature-256 is missing or does not match")
    elif not _same(request.headers.get("x-gitlab-token", ""), secret):
        raise ApiError(401, "X-Gitlab-Token is missing or does not match")
    return secret


async def _signed_body(connection: ConnectionSettings, request: Request, secret: str) -> bytes:
    """The body, read in bounded chunks; for GitHub only once its HMAC matched (401)."""
    mac = hmac.new(secret.encode(), digestmod=hashlib.sha256)
    with tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY) as spool:
        async for chunk in chunks(request, MAX_BODY, "body"):
            mac.update(chunk)
            spool.write(chunk)
        if connection.driver == "github":
            given = request.headers.get("x-hub-signature-256", "")
            if not _same(given, f"sha256={mac.hexdigest()}"):
                raise ApiError(401, "X-Hub-Signature-256 is missing or does not match")
        spool.seek(0)
        return spool.read()


async def payload(request: Request) -> Response:
    try:
        return await _receive(request)
    except ApiError as exc:
        if exc.status == 401:
            log.warning("webhook refused: %s", exc.description)
        return error_response(exc)
    except ClientDisconnect:  # gone while sending its body: nobody reads the answer
        return Response(status_code=400)
    except Exception:
        log.exception("webhook for %s failed", request.path_params.get("connection"))
        return error_response(ApiError(500, "internal error (logged by the server)"))


async def _receive(request: Request) -> Response:
    from web.context import WebContext

    ctx: WebContext = request.app.state.context
    name = request.path_params["connection"]
    connection = ctx.settings.connections.get(name)
    if connection is None or connection.driver not in HEADERS:
        raise ApiError(404, f"no github or gitlab connection {name!r}")
    body = await _signed_body(connection, request, _secret(connection, request))
    found = _delivery(connection, request, body)
    if isinstance(found, Response):
        return found
    try:
        fresh = await run_in_threadpool(webhooks.store, ctx.client, name, found)
    except Exception:
        log.exception("webhook %s for %s not stored", found.delivery, name)
        raise ApiError(503, "the event could not be stored; deliver it again") from None
    if not fresh:
        return JSONResponse({"status": "duplicate", "delivery": found.delivery})
    try:
        await run_in_threadpool(
            dispatch.send_quickly,
            task_names.FORWARD_CONNECTION_EVENTS,
            name,
            settings=ctx.settings,
        )
    except Exception:  # stored: the sweep nudges the connection hop later
        log.warning("webhook %s stored; nudge not sent", found.delivery, exc_info=True)
    return JSONResponse({"status": "stored", "delivery": found.delivery})


def _delivery(
    connection: ConnectionSettings, request: Request, body: bytes
) -> webhooks.WebhookDelivery | Response:
    """The delivery to store, or the answer to give without storing anything."""
    event_header, delivery_header = HEADERS[connection.driver]
    event = request.headers.get(event_header, "")
    delivery = request.headers.get(delivery_header, "")
    if not event or not delivery:
        which = event_header if not event else delivery_header
        raise ApiError(400, f"header {which} is missing", which)
    if event == "ping":
        return JSONResponse({"status": "pong"})
    if event not in webhooks.STORED[connection.driver]:
        return JSONResponse({"status": "ignored", "event": event}, status_code=202)
    parsed: Any = parse_json(body, "body")
    if not isinstance(parsed, dict):
        raise ApiError(400, "the body is not a JSON object")
    return webhooks.WebhookDelivery(connection.driver, event, delivery, parsed)
