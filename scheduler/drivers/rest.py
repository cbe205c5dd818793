"""One JSON-over-HTTP call loop for the forge clients: deadline, rate limits, clear errors.

A call has a deadline (:data:`TIMEOUT`, or the connection's ``api_timeout``).
An answer that says a rate limit was hit (403/429 with
``X-RateLimit-Remaining: 0`` and a reset time, or ``Retry-After``, or
GitLab's ``RateLimit-Reset``) waits until the reset (at most
:data:`MAX_RATE_WAIT` seconds) and tries once more. Every failure becomes
the driver's :class:`~scheduler.drivers.ForgeError` subclass with the HTTP
status (0 for no answer).
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from scheduler.drivers import ForgeError

log = logging.getLogger(__name__)

MAX_RATE_WAIT = 300.0
TIMEOUT = 30.0


def rate_limit_wait(exc: urllib.error.HTTPError, now: float | None = None) -> float | None:
    """Seconds to wait before trying again, if ``exc`` says a rate limit was hit."""
    if exc.code not in (403, 429):
        return None
    now = time.time() if now is None else now
    headers = exc.headers
    try:
        if headers.get("Retry-After"):
            return min(MAX_RATE_WAIT, float(headers["Retry-After"]))
        if headers.get("X-RateLimit-Remaining") == "0" and headers.get("X-RateLimit-Reset"):
            return min(MAX_RATE_WAIT, max(0.0, float(headers["X-RateLimit-Reset"]) - now))
        if exc.code == 429 and headers.get("RateLimit-Reset"):
            return min(MAX_RATE_WAIT, max(0.0, float(headers["RateLimit-Reset"]) - now))
    except ValueError:
        return None
    return None


def call(
    name: str,
    error: type[ForgeError],
    url: str,
    method: str,
    *,
    headers: Mapping[str, str],
    body: Any = None,
    sleep: Callable[[float], None] = time.sleep,
    timeout: float = TIMEOUT,
) -> Any:
    """``method url`` with a JSON ``body``; the decoded JSON answer (None if empty)."""
    data = None if body is None else json.dumps(body).encode()
    sent = {"User-Agent": "sluice", **headers}
    if data is not None:
        sent["Content-Type"] = "application/json"
    for attempt in (1, 2):
        try:
            request = urllib.request.Request(url, data, sent, method=method)
            with urllib.request.urlopen(request, timeout=timeout) as response:
                raw = response.read()
            return json.loads(raw) if raw else None
        except urllib.error.HTTPError as exc:
            wait = rate_limit_wait(exc)
            if wait is None or attempt == 2:
                detail = exc.read().decode("utf-8", "replace")[:300]
                raise error(f"{name} {method} {url}: {exc.code} {detail}", exc.code) from None
            log.warning("%s rate limit: waiting %.0fs before %s %s", name, wait, method, url)
            sleep(wait)
        except (urllib.error.URLError, TimeoutError, OSError, ValueError) as exc:
            raise error(f"{name} {method} {url}: {exc}") from None
    raise AssertionError("unreachable")
