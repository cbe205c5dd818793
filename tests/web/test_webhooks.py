"""Webhooks from GitHub and GitLab: signed deliveries stored once, then pipelines run.

The forges' pushes arrive at ``sluice web`` as their webhooks do (GitHub's
HMAC signature, GitLab's token); the repositories behind the connections
are real git repositories on disk. A signed push runs the ``post``
pipeline; the same delivery again is stored once; a bad signature stores
nothing; an event type the driver does not use is acknowledged and ignored;
a body that is not JSON is a 400.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from scheduler.zk import paths
from scheduler.zk.client import connect
from scheduler.zk.event_queue import EventQueue
from tests.e2e.system import SluiceSystem
from tests.web.server import WebServer, start_web

SECRET = "webhook-secret"
CONNECTIONS = f"""
  github:
    driver: github
    baseurl: repos
    webhook_token: {SECRET}
  gitlab:
    driver: gitlab
    baseurl: repos
    webhook_token: {SECRET}
"""
TENANT = """
- tenant:
    name: demo
    source:
      local:
        config-projects: [config]
      github:
        untrusted-projects: [org/app]
      gitlab:
        untrusted-projects: [group/lib]
"""
CONFIG = {
    "zuul.d/pipelines.yaml": """
        - pipeline:
            name: post
            manager: independent
            trigger:
              github:
                - event: push
                  branch: ^main$
              gitlab:
                - event: gl_push
                  branch: ^main$
        - job:
            name: base
            parent: null
            timeout: 60
        - job:
            name: publish
            run: ci/publish.sh
        """,
    "ci/publish.sh": "#!/bin/sh\necho published\n",
}
PROJECT = {
    ".zuul.yaml": """
        - project:
            post: {jobs: [publish]}
        """,
}


@pytest.fixture
def forge(system: SluiceSystem) -> Iterator[WebServer]:
    text = system.config.read_text()
    system.config.write_text(text.replace("connections:\n", "connections:\n" + CONNECTIONS))
    system.tenant(TENANT)
    system.repos.commit("config", "main", CONFIG)
    system.repos.commit("org/app", "main", PROJECT)
    system.repos.commit("group/lib", "main", PROJECT)
    system.start_workers()
    system.sluice("reconfigure")
    with start_web(system, "") as server:
        yield server


def deliver(
    web: WebServer, connection: str, headers: dict[str, str], body: bytes
) -> tuple[int, Any]:
    request = urllib.request.Request(
        f"{web.url}/api/connection/{connection}/payload",
        body,
        {"Content-Type": "application/json", **headers},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def github_headers(event: str, body: bytes, delivery: str, secret: str = SECRET) -> dict[str, str]:
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": f"sha256={digest}",
    }


def push_body(system: SluiceSystem, project: str, key: str) -> bytes:
    after = system.repos.git(project, "rev-parse", "main")
    return json.dumps(
        {
            "ref": "refs/heads/main",
            "before": "0" * 40,
            "after": after,
            key: {"full_name": project, "path_with_namespace": project},
        }
    ).encode()


def stored_events(web: WebServer, connection: str) -> int:
    client = connect(web.system.environment.zookeeper.settings())
    try:
        return EventQueue(client, paths.connection_event_queue(connection)).length()
    finally:
        client.stop()
        client.close()


def test_github_push_runs_post_once_per_delivery(forge: WebServer) -> None:
    system = forge.system
    body = push_body(system, "org/app", "repository")
    delivery = str(uuid.uuid4())

    wrong = github_headers("push", body, delivery, secret="not-the-secret")
    assert deliver(forge, "github", wrong, body)[0] == 401
    unsigned = {k: v for k, v in wrong.items() if k != "X-Hub-Signature-256"}
    assert deliver(forge, "github", unsigned, body)[0] == 401
    odd = {**wrong, "X-Hub-Signature-256": "sha256=\u00e9t\u00e9"}  # not ASCII
    assert deliver(forge, "github", odd, body)[0] == 401
    assert stored_events(forge, "github") == 0 and system.buildsets() == []

    assert deliver(forge, "github", github_headers("push", body, delivery), body) == (
        200,
        {"status": "stored", "delivery": delivery},
    )
    again = deliver(forge, "github", github_headers("push", body, delivery), body)
    assert again == (200, {"status": "duplicate", "delivery": delivery})
    system.sluice("wait", "--idle", "--timeout", "90")
    (buildset,) = system.buildsets()
    assert (buildset["project"], buildset["pipeline"], buildset["result"]) == (
        "org/app",
        "post",
        "SUCCESS",
    )

    watch = b'{"action": "started"}'
    status, answer = deliver(forge, "github", github_headers("watch", watch, "w1"), watch)
    assert (status, answer["status"]) == (202, "ignored")
    garbage = b"{not json"
    status, answer = deliver(forge, "github", github_headers("push", garbage, "g1"), garbage)
    assert status == 400 and "JSON" in answer["description"]
    assert deliver(forge, "nope", github_headers("push", body, "n1"), body)[0] == 404
    no_id = {k: v for k, v in github_headers("push", body, "x").items() if "Delivery" not in k}
    status, answer = deliver(forge, "github", no_id, body)
    assert status == 400 and answer["field"] == "x-github-delivery"
    assert stored_events(forge, "github") == 0  # all consumed; nothing bad was stored


def test_gitlab_push_with_its_token(forge: WebServer) -> None:
    system = forge.system
    body = push_body(system, "group/lib", "project")
    headers = {"X-Gitlab-Event": "Push Hook", "X-Gitlab-Event-UUID": str(uuid.uuid4())}
    assert deliver(forge, "gitlab", {**headers, "X-Gitlab-Token": "wrong"}, body)[0] == 401
    assert deliver(forge, "gitlab", headers, body)[0] == 401
    status, answer = deliver(forge, "gitlab", {**headers, "X-Gitlab-Token": SECRET}, body)
    assert (status, answer["status"]) == (200, "stored")
    system.sluice("wait", "--idle", "--timeout", "90")
    (buildset,) = system.buildsets()
    assert (buildset["project"], buildset["pipeline"], buildset["result"]) == (
        "group/lib",
        "post",
        "SUCCESS",
    )
