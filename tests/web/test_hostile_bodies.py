"""Hostile bodies against a real ``sluice web``: bounded reads, the token first, sane JSON.

Every request here is an attack: bodies of 300 MB (chunked, or announced by
``Content-Length``) to an admin verb and to the webhook endpoint are refused
with 413 as soon as they pass the endpoint's limit while the web's peak
memory stays put; a bad or missing token is a 401 (a token for another
tenant a 403) before the body or the parameters are looked at; a webhook's
signature is checked before its JSON is parsed; JSON nested 60 000 deep, or
not JSON at all, is a 400 saying so, never a 500 or a traceback.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.system import SluiceSystem
from tests.web.hostile import peak_rss, post_stream, reset_peak
from tests.web.server import WEB_CONFIG, WebServer, start_web, token
from web.bodies import MAX_DEPTH, parse_json, too_deep
from web.errors import ApiError

HOOK_SECRET = "hostile-webhook-secret"
CONNECTIONS = f"""
  github:
    driver: github
    baseurl: repos
    webhook_token: {HOOK_SECRET}
  gitlab:
    driver: gitlab
    baseurl: repos
    webhook_token: {HOOK_SECRET}
"""
ENQUEUE = "/api/tenant/demo/project/app/enqueue"
GITHUB = "/api/connection/github/payload"
GITLAB = "/api/connection/gitlab/payload"
BIG = 300 * 1024 * 1024
MB = 1024 * 1024
DEEP = b"[" * 60_000


@pytest.fixture
def hostile(system: SluiceSystem) -> Iterator[WebServer]:
    """A ``sluice web`` with an authenticator and a GitHub and a GitLab connection."""
    text = system.config.read_text()
    system.config.write_text(text.replace("connections:\n", "connections:\n" + CONNECTIONS))
    with start_web(system, WEB_CONFIG) as server:
        yield server


def admin(*tenants: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(*tenants)}", "Content-Type": "application/json"}


def signed(body: bytes, event: str = "push", secret: str = HOOK_SECRET) -> dict[str, str]:
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": "d-1",
        "X-Hub-Signature-256": f"sha256={digest}",
    }


def post(web: WebServer, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
    answer = httpx.post(web.url + path, content=body, headers=headers, timeout=30)
    assert answer.headers["content-type"].startswith("application/json"), answer.text
    assert "Traceback" not in answer.text
    return answer.status_code, answer.json()


def test_a_300_mb_body_is_refused_as_it_streams_and_memory_stays_put(hostile: WebServer) -> None:
    web = hostile
    # warm up: the same paths with small bodies, so the peak below is the attack's own
    assert post(web, ENQUEUE, b"{}", admin("demo"))[0] == 400
    assert post(web, GITHUB, b"{}", signed(b"{}", secret="wrong"))[0] == 401
    reset_peak(web.pid)
    before = peak_rss(web.pid)

    # chunked, no Content-Length: refused once past 64 KiB (socket buffers hold the rest)
    answer = post_stream(web.url, ENQUEUE, admin("demo"), BIG)
    assert answer.status == 413 and b"larger than 65536 bytes" in answer.body
    assert answer.headers["connection"] == "close"
    assert answer.sent < 16 * MB, answer.sent
    # a Content-Length that says too much: refused before a byte of the body is sent
    answer = post_stream(web.url, ENQUEUE, admin("demo"), BIG, chunked=False, send_body=False)
    assert (answer.status, answer.sent) == (413, 0)
    # a Content-Length that lies low: only that much is read as the body
    answer = post_stream(web.url, ENQUEUE, admin("demo"), 4 * MB, chunked=False, declared=2)
    assert answer.status == 400 and b"'pipeline' is required" in answer.body

    # the webhook endpoint, 10 MiB: spooled and hashed as it streams, then refused
    hook = {"X-GitHub-Event": "push", "X-GitHub-Delivery": "d", "X-Hub-Signature-256": "sha256=0"}
    answer = post_stream(web.url, GITHUB, hook, BIG)
    assert answer.status == 413 and b"larger than 10485760 bytes" in answer.body
    assert 10 * MB < answer.sent < 30 * MB, answer.sent
    answer = post_stream(web.url, GITHUB, hook, BIG, chunked=False, send_body=False)
    assert (answer.status, answer.sent) == (413, 0)
    gitlab = {"X-Gitlab-Event": "Push Hook", "X-Gitlab-Event-UUID": "u", "X-Gitlab-Token": "x"}
    answer = post_stream(web.url, GITLAB, gitlab, BIG)  # wrong token: no body read at all
    assert answer.status == 401 and answer.sent < 16 * MB

    grown = peak_rss(web.pid) - before
    print(f"peak RSS of sluice web grew {grown / MB:.1f} MB over five 300 MB bodies")
    assert grown < 8 * MB


def test_admin_verbs_check_the_token_before_the_request(hostile: WebServer) -> None:
    web = hostile
    garbage = b"{not json"
    json_headers = {"Content-Type": "application/json"}
    cases = {
        "no token": json_headers,
        "not a JWT": {**json_headers, "Authorization": "Bearer not-a-jwt"},
        "wrong secret": {
            **json_headers,
            "Authorization": f"Bearer {token('demo', secret='x' * 40)}",
        },
        "expired": {"Authorization": f"Bearer {token('demo', expires_in=-60)}"},
    }
    for name, headers in cases.items():
        for body in (garbage, DEEP, b'{"pipeline": 7}'):
            status, answer = post(web, ENQUEUE, body, headers)
            assert status == 401, (name, answer)
        # a malformed path or query is not looked at either
        assert post(web, "/api/tenant/demo/project/bad!name/enqueue", b"{}", headers)[0] == 401
        assert post(web, ENQUEUE + "?colour=red", b"{}", headers)[0] == 401
        # nor a body too big (its Content-Length is)
        answer = post_stream(web.url, ENQUEUE, headers, BIG, chunked=False, send_body=False)
        assert (answer.status, answer.sent) == (401, 0), name
    other = admin("other")
    for body in (garbage, DEEP):
        status, answer = post(web, ENQUEUE, body, other)
        assert status == 403 and "'demo'" in answer["description"], answer
    # a malformed tenant: its name is compared with the token's, then refused
    assert post(web, "/api/tenant/de%00mo/project/app/enqueue", b"{}", other)[0] == 403
    status, answer = post(web, "/api/tenant/de%00mo/project/app/enqueue", b"{}", admin("*"))
    assert (status, answer["field"]) == (400, "tenant")
    # the token passed: now the body is checked
    status, answer = post(web, ENQUEUE, garbage, admin("demo"))
    assert status == 400 and "not valid JSON" in answer["description"]
    response = httpx.delete(f"{web.url}/api/tenant/demo/autohold/bad!id", timeout=30)
    assert response.status_code == 401


def test_webhook_signatures_are_checked_before_the_json(hostile: WebServer) -> None:
    web = hostile
    for body in (b"{not json", DEEP, b"[1, 2]"):
        status, answer = post(web, GITHUB, body, signed(body, secret="not-the-secret"))
        assert status == 401, answer
        unsigned = {k: v for k, v in signed(body).items() if k != "X-Hub-Signature-256"}
        assert post(web, GITHUB, body, unsigned)[0] == 401
        gitlab = {"X-Gitlab-Event": "Push Hook", "X-Gitlab-Event-UUID": "u"}
        assert post(web, GITLAB, body, {**gitlab, "X-Gitlab-Token": "wrong"})[0] == 401
    # signed: then parsed, and refused for what it is
    status, answer = post(web, GITHUB, DEEP, signed(DEEP))
    assert status == 400 and f"deeper than {MAX_DEPTH}" in answer["description"]
    status, answer = post(web, GITHUB, b"{not json", signed(b"{not json"))
    assert status == 400 and "not valid JSON" in answer["description"]
    gitlab = {"X-Gitlab-Event": "Push Hook", "X-Gitlab-Event-UUID": "u"}
    status, answer = post(web, GITLAB, DEEP, {**gitlab, "X-Gitlab-Token": HOOK_SECRET})
    assert status == 400 and f"deeper than {MAX_DEPTH}" in answer["description"]


def test_hostile_json_is_a_400_saying_why(hostile: WebServer) -> None:
    web = hostile
    malformed = {
        DEEP: f"deeper than {MAX_DEPTH}",
        b'{"a": ' + b"{" * 100 + b"}" * 100 + b"}": f"deeper than {MAX_DEPTH}",
        b"[" * 200 + b'"' + b"]" * 200: f"deeper than {MAX_DEPTH}",
        b'{"pipeline": ' + b"1" * 5000 + b"}": "not valid JSON",
        b'{"pipeline": "\xff"}': "not UTF-8",
        b'{"pipeline": "check"': "not valid JSON",
        b"\x00\x00\x00[": "not valid JSON",
    }
    for body, reason in malformed.items():
        for path, headers in ((ENQUEUE, admin("demo")), (GITHUB, signed(body))):
            status, answer = post(web, path, body, headers)
            assert status == 400 and reason in answer["description"], (path, body[:40], answer)
    # JSON, but not what the verb takes
    shallow = json.dumps({"pipeline": "check", "change": "bad ref~", "deep": _nest(MAX_DEPTH - 2)})
    for body, reason in ((b"[]", "expected a JSON object"), (shallow.encode(), "'change'")):
        status, answer = post(web, ENQUEUE, body, admin("demo"))
        assert status == 400 and reason in answer["description"], answer
    status, answer = post(web, GITHUB, b"[]", signed(b"[]"))
    assert status == 400 and "not a JSON object" in answer["description"]


def test_depth_is_counted_outside_strings() -> None:
    assert not too_deep(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH)
    assert too_deep(b"[" * (MAX_DEPTH + 1))
    assert not too_deep(b'["' + b"[" * 500 + b'"]')
    assert not too_deep(b'["\\"' + b"{" * 500 + b'"]')
    assert too_deep(b'["\\\\"' + b", [" * 100 + b"]")
    assert parse_json(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH) == parse_json(
        json.dumps(_nest(MAX_DEPTH - 1)).encode()
    )
    with pytest.raises(ApiError) as refused:
        parse_json(b"[" * 100_000)
    assert refused.value.status == 400


def _nest(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value
