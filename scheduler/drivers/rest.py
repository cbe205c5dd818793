"""One JSON-over-HTTP call loop for the forge clients: deadline, rate limits, clear errors.

A call has a deadline (:data:`TIMEOUT`, or the connection's ``api_timeout``).
An answer that says a rate limit was hit (403/429 with
``X-RateLimit-Remaining: 0`` and a reset time, or ``Retry-After``, or
GitLab's ``RateLimit-Reset``) waits until the reset (at most
:data:`MAX_RATE_WAIT` seconds) and tries once more. Every failure becomes
the driver's :class:`~scheduler.drivers.ForgeError` subclass with the HTTP
status (0 for no answer).

Redirects are followed as urllib follows them, with one difference: when
one leads to another origin (scheme, host or port), the credentials
(``Authorization``, GitLab's ``PRIVATE-TOKEN`` and ``JOB-TOKEN``, cookies)
are not sent there, and a redirect to anything but http or https is an
error. A forge (or whoever answers in its name) cannot send a token to a
host of its choosing.

Lists are read whole (:func:`call_pages`): the next page is the ``Link``
header's ``rel="next"`` (GitHub, GitLab) or GitLab's ``X-Next-Page``, at
most :data:`MAX_PAGES` pages, and a next page on another origin is refused.
"""

from __future__ import annotations

import json
import logging
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from http.client import HTTPMessage
from typing import IO, Any
from urllib.parse import urlsplit

from scheduler.drivers import ForgeError

log = logging.getLogger(__name__)

MAX_RATE_WAIT = 300.0
TIMEOUT = 30.0
# headers that carry a credential: never sent to another origin than the one asked
CREDENTIALS = frozenset({"authorization", "private-token", "job-token", "cookie"})
DEFAULT_PORTS = {"http": 80, "https": 443}
# pages of one list read at most (100 items each: 10,000 reviews, files, notes)
MAX_PAGES = 100
_NEXT_LINK = re.compile(r'<([^>]*)>\s*;[^,]*\brel="?next"?', re.IGNORECASE)


def origin(url: str) -> tuple[str, str, int | None]:
    """``(scheme, host, port)`` of ``url``, the port made explicit."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), parts.port or DEFAULT_PORTS.get(scheme)


class CredentialsStayHome(urllib.request.HTTPRedirectHandler):
    """urllib's redirects, without the credentials when the origin changes."""

    def redirect_request(  # noqa: PLR0917 (urllib's signature)
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        if urlsplit(newurl).scheme.lower() not in DEFAULT_PORTS:
            raise urllib.error.HTTPError(newurl, code, f"redirect to {newurl!r}", headers, fp)
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and origin(new.full_url) != origin(req.full_url):
            for name in [n for n in new.headers if n.lower() in CREDENTIALS]:
                del new.headers[name]
            log.warning("%s redirected to %s: credentials not sent there", req.full_url, newurl)
        return new


_opener = urllib.request.build_opener(CredentialsStayHome)


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
    return _call(name, error, url, method, headers, body, sleep, timeout)[0]


def call_pages(
    name: str,
    error: type[ForgeError],
    url: str,
    *,
    headers: Mapping[str, str],
    sleep: Callable[[float], None] = time.sleep,
    timeout: float = TIMEOUT,
) -> list[Any]:
    """Every item of the list at ``url`` (a GET), following the forge's pagination.

    An answer that is not a JSON list is an error; so is a next page on
    another origin, or more than :data:`MAX_PAGES` pages.
    """
    found: list[Any] = []
    seen: set[str] = set()
    while url:
        if len(seen) >= MAX_PAGES:
            raise error(f"{name} GET {url}: more than {MAX_PAGES} pages")
        seen.add(url)
        answer, response = _call(name, error, url, "GET", headers, None, sleep, timeout)
        if answer is None:
            answer = []
        if not isinstance(answer, list):
            raise error(f"{name} GET {url}: expected a list, got {type(answer).__name__}")
        found += answer
        following = next_page(url, response)
        if following and origin(following) != origin(url):
            raise error(f"{name} GET {url}: next page {following!r} is on another origin")
        url = "" if following in seen else following
    return found


def next_page(url: str, headers: Mapping[str, str]) -> str:
    """The next page's URL from an answer's headers ("" if this was the last)."""
    link = _NEXT_LINK.search(headers.get("Link") or "")
    if link:
        return str(urllib.parse.urljoin(url, link[1]))
    page = (headers.get("X-Next-Page") or "").strip()
    if not page.isdigit():
        return ""
    parts = urllib.parse.urlsplit(url)
    query = [(k, v) for k, v in urllib.parse.parse_qsl(parts.query) if k != "page"]
    query.append(("page", page))
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))


def reason_of(answer: str) -> str:
    """A forge's own words from an error answer: its JSON ``message`` ("" if none)."""
    try:
        found = json.loads(answer)
    except ValueError:
        return ""
    message = found.get("message") if isinstance(found, dict) else None
    if isinstance(message, str):
        return message[:200]
    if isinstance(message, dict | list):  # GitLab: {"base": ["..."]} or a list
        return json.dumps(message)[:200]
    return ""


def _call(  # noqa: PLR0917 (the two public calls' arguments, passed on)
    name: str,
    error: type[ForgeError],
    url: str,
    method: str,
    headers: Mapping[str, str],
    body: Any,
    sleep: Callable[[float], None],
    timeout: float,
) -> tuple[Any, Mapping[str, str]]:
    data = None if body is None else json.dumps(body).encode()
    sent = {"User-Agent": "sluice", **headers}
    if data is not None:
        sent["Content-Type"] = "application/json"
    for attempt in (1, 2):
        try:
            request = urllib.request.Request(url, data, sent, method=method)
            with _opener.open(request, timeout=timeout) as response:
                raw = response.read()
                answered = {k: v for k, v in response.headers.items()}
            return (json.loads(raw) if raw else None), answered
        except urllib.error.HTTPError as exc:
            wait = rate_limit_wait(exc)
            if wait is None or attempt == 2:
                detail = exc.read().decode("utf-8", "replace")[:300]
                raise error(
                    f"{name} {method} {url}: {exc.code} {detail}", exc.code, reason_of(detail)
                ) from None
            log.warning("%s rate limit: waiting %.0fs before %s %s", name, wait, method, url)
            sleep(wait)
        except (urllib.error.URLError, TimeoutError, OSError, ValueError) as exc:
            raise error(f"{name} {method} {url}: {exc}") from None
    raise AssertionError("unreachable")
