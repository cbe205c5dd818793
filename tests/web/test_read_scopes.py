"""``web.protect_reads`` per tenant, against a real ``sluice web`` over two tenants.

A token reads the tenants its ``zuul.admin`` claim names (``"*"``: all of
them): another tenant's status, builds, logs, jobs and event streams are a
403, whether that tenant exists or not; ``/api/tenants`` lists only what
the token may read; ``/metrics`` and ``/api/components`` (every tenant's
figures and processes) need a ``"*"`` token. An event stream ends when the
token that opened it expires.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from tests.e2e.system import TENANT_YAML, SluiceSystem
from tests.e2e.test_check_pipeline import prepare_check
from tests.web.server import WEB_CONFIG, WebServer, start_web, token

TWO_TENANTS = (
    TENANT_YAML
    + """
- tenant:
    name: other
    source:
      local:
        config-projects: [config]
"""
)
PROTECTED = WEB_CONFIG.replace("web:\n", "web:\n  protect_reads: true\n")


@pytest.fixture
def protected(system: SluiceSystem) -> Iterator[WebServer]:
    """A protected web over tenants ``demo`` (with a finished check) and ``other``."""
    prepare_check(system)
    system.tenant(TWO_TENANTS)
    system.start_workers()
    system.sluice("reconfigure")
    system.enqueue("feature")
    system.sluice("wait", "--idle", "--timeout", "90")
    with start_web(system, PROTECTED) as server:
        yield server


def status(web: WebServer, path: str, auth: str | None) -> int:
    """The status of a GET; an event stream's is read from its head, then it is left."""
    headers = {"Authorization": f"Bearer {auth}"} if auth else {}
    with httpx.stream("GET", web.url + path, headers=headers, timeout=30) as answer:
        if answer.status_code == 200 and "event-stream" in answer.headers["content-type"]:
            next(answer.iter_lines())  # the first event came
        return answer.status_code


def test_a_token_reads_only_its_tenants(protected: WebServer) -> None:
    web = protected
    demo, other, every, nothing = token("demo"), token("other"), token("*"), token()
    (build,) = [b for b in web.get("/api/tenant/demo/builds", auth=demo) if b["job_name"] == "lint"]
    uuid = build["uuid"]
    reads = [
        "status",
        "status/change/feature",
        "status/events",
        "builds",
        f"build/{uuid}",
        f"build/{uuid}/log",
        f"build/{uuid}/log/stream",
        "buildsets",
        "jobs",
        "job/lint",
        "projects",
        "project/app",
        "pipelines",
        "config-errors",
        "autohold",
        "key/app.pub",
    ]
    for read in reads:
        path = f"/api/tenant/demo/{read}"
        assert status(web, path, None) == 401, path
        assert status(web, path, "not-a-jwt") == 401, path
        assert status(web, path, other) == 403, path
        assert status(web, path, nothing) == 403, path
        assert status(web, path, demo) == 200, path
        assert status(web, path, every) == 200, path
    # what demo's token reads of "other" (which exists) and of "nope" (which does not): the same
    for tenant in ("other", "nope"):
        for read in ("status", "builds", f"build/{uuid}/log", "status/events"):
            assert status(web, f"/api/tenant/{tenant}/{read}", demo) == 403
    assert status(web, "/api/tenant/nope/status", every) == 404
    # a malformed tenant name is compared with the token's before it is checked
    assert status(web, "/api/tenant/..%20x/status", demo) == 403
    assert status(web, "/api/tenant/..%20x/status", every) == 400

    def tenants(auth: str) -> list[str]:
        return [t["name"] for t in web.get("/api/tenants", auth=auth)]

    assert status(web, "/api/tenants", None) == 401
    assert tenants(demo) == ["demo"]
    assert "demo" not in tenants(other)  # ("other" is listed once it has queues or state)
    assert "demo" in tenants(every)
    assert tenants(nothing) == []

    for path in ("/metrics", "/api/components"):
        assert status(web, path, None) == 401, path
        assert status(web, path, demo) == 403, path
        assert status(web, path, every) == 200, path
    metrics = web.request("GET", "/metrics", auth=every)
    assert "sluice_builds_total{result=" in metrics.body
    # open: capabilities, and a tenant's info whether it exists or not
    assert status(web, "/api/info", None) == 200
    assert status(web, "/api/tenant/demo/info", None) == 200
    assert status(web, "/api/tenant/nope/info", None) == 200
    assert status(web, "/api/openapi.json", None) == 200
    assert status(web, "/health", None) == 200


def test_an_event_stream_ends_with_its_token(protected: WebServer) -> None:
    web = protected
    started = time.monotonic()
    headers = {"Authorization": f"Bearer {token('demo', expires_in=3)}"}
    path = "/api/tenant/demo/status/events"
    with httpx.stream("GET", web.url + path, headers=headers, timeout=30) as answer:
        assert answer.status_code == 200
        events = [line for line in answer.iter_lines() if line.startswith("event:")]
    assert events[:1] == ["event: status"]
    assert time.monotonic() - started < 15
