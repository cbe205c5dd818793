"""Set-aside deliveries, as an operator meets them: ``sluice deliveries`` and the API.

A fake GitHub (and a fake GitLab) behind real connections, a real ``sluice
web`` that takes their webhooks and answers the API, real workers. A
delivery the hop cannot use is set aside with its reason; the operator lists
it (CLI and ``GET /api/connection/<c>/deliveries``, behind an admin token),
retries it (it is translated again: here the pull request it names exists
by then) or discards it.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.e2e.system import SluiceSystem
from tests.fixtures import fake_github, fake_gitlab
from tests.fixtures.fake_github import FakeGitHub, Pull
from tests.fixtures.fake_gitlab import FakeGitLab
from tests.fixtures.waiting import wait_until
from tests.web.server import WEB_CONFIG, WebServer, start_web, token
from tests.web.test_github_journey import TENANT

SECRET = "deliveries-webhook-secret"
CONFIG = {
    "zuul.d/pipelines.yaml": r"""
        - pipeline:
            name: check
            manager: independent
            trigger:
              github:
                - event: pull_request
                  action: [opened, changed]
            success:
              github: {status: success}
            failure:
              github: {status: failure}
        - job:
            name: base
            parent: null
            timeout: 60
        - job:
            name: unit
            run: ci/unit.sh
        """,
    "ci/unit.sh": "#!/bin/sh\necho testing\n",
}
APP = {".zuul.yaml": "- project:\n    check: {jobs: [unit]}\n", "src/app.py": "value = 1\n"}
# a forge unavailable for a delivery: one more try a second later, then set aside
RETRY = "    delivery_attempts: 2\n    delivery_backoff: 1\n"


@dataclass
class Forges:
    github: FakeGitHub
    gitlab: FakeGitLab
    web: WebServer

    @property
    def system(self) -> SluiceSystem:
        return self.web.system

    def post(self, driver: str, event: str, body: Any, delivery: str = "") -> dict[str, Any]:
        """A signed delivery of ``body`` (any JSON, or raw bytes) to the connection."""
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        delivery = delivery or str(uuid.uuid4())
        if driver == "github":
            digest = hmac.new(SECRET.encode(), raw, hashlib.sha256).hexdigest()
            headers = {
                "X-GitHub-Event": event,
                "X-GitHub-Delivery": delivery,
                "X-Hub-Signature-256": f"sha256={digest}",
            }
            return self.github.post_webhook(raw, headers)
        headers = {"X-Gitlab-Event": event, "X-Gitlab-Event-UUID": delivery}
        return self.gitlab.post_webhook(raw, {**headers, "X-Gitlab-Token": SECRET})

    def rows(self, *args: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = json.loads(
            self.system.sluice("deliveries", "list", "--json", *args)
        )
        return found

    def quiet(self, timeout: float = 60) -> None:
        """Idle: every queue empty, nothing deferred, no item left."""
        self.system.sluice("wait", "--idle", "--timeout", str(timeout))


@contextlib.contextmanager
def forges(
    system: SluiceSystem, options: str = RETRY, config: dict[str, str] | None = None
) -> Iterator[Forges]:
    """Connections ``github`` and ``gitlab`` to fake forges; tenant ``demo`` holds org/app."""
    github = FakeGitHub(system.repos, "", SECRET)
    gitlab = FakeGitLab(system.repos, "", SECRET)
    with github, gitlab:
        connections = "".join(
            f"  {name}:\n    driver: {name}\n    baseurl: repos\n    api_url: {url}\n"
            f"    api_token: {api_token}\n    webhook_token: {SECRET}\n" + options
            for name, url, api_token in (
                ("github", github.url, fake_github.TOKEN),
                ("gitlab", gitlab.url, fake_gitlab.TOKEN),
            )
        )
        text = system.config.read_text()
        system.config.write_text(text.replace("connections:\n", "connections:\n" + connections))
        system.tenant(TENANT)
        system.repos.commit("config", "main", config or CONFIG)
        base = system.repos.commit("org/app", "main", APP)
        system.repos.commit("org/app", "fix", {"src/fix.py": "fixed = True\n"}, base=base)
        system.repos.git("org/app", "checkout", "-q", "--detach")
        system.start_workers()
        system.sluice("reconfigure")
        with start_web(system, WEB_CONFIG) as web:
            github.webhook_url = f"{web.url}/api/connection/github/payload"
            gitlab.webhook_url = f"{web.url}/api/connection/gitlab/payload"
            yield Forges(github, gitlab, web)


@pytest.fixture
def sites(system: SluiceSystem) -> Iterator[Forges]:
    with forges(system) as found:
        yield found


def branch(sites: Forges, name: str) -> None:
    """A topic branch of org/app off main."""
    repos = sites.system.repos
    main = repos.git("org/app", "rev-parse", "main")
    repos.commit("org/app", name, {f"src/{name}.py": "x = 1\n"}, base=main)
    repos.git("org/app", "checkout", "-q", "--detach")


def silent_pull(forge: FakeGitHub, number: int, branch: str = "fix") -> Pull:
    """A pull request GitHub has, whose webhook was never delivered."""
    pull = Pull("org/app", number, branch, "main", f"Change {number}")
    with forge.lock:
        forge.pulls[("org/app", number)] = pull
    forge.point_ref("org/app", branch, f"refs/pull/{number}/head")
    return pull


def pull_event(pull: Pull, action: str, sha: str) -> dict[str, Any]:
    """A ``pull_request`` webhook body, as GitHub sent it when the head was ``sha``."""
    shown = {
        "number": pull.number,
        "title": pull.title,
        "state": "open",
        "head": {"sha": sha, "ref": pull.branch},
        "base": {"ref": pull.base},
        "labels": [],
    }
    return {"action": action, "pull_request": shown, "repository": {"full_name": pull.project}}


def test_set_aside_deliveries_are_listed_retried_and_discarded(sites: Forges) -> None:
    system, web = sites.system, sites.web
    pull = Pull("org/app", 1, "fix", "main", "Change 1")
    early = pull_event(pull, "opened", "a" * 40)  # before GitHub has it: 404
    sites.post("github", "pull_request", early, "early-1")
    spaced = {**early, "repository": {"full_name": "org/app x"}}  # a name with a space
    sites.post("github", "pull_request", spaced, "spaced-1")
    sites.post("gitlab", "Merge Request Hook", {"object_attributes": []}, "wrong-shape")
    sites.quiet()

    rows = {r["delivery"]: r for r in sites.rows()}
    assert set(rows) == {"early-1", "spaced-1", "wrong-shape"}
    assert "404" in rows["early-1"]["reason"] and rows["early-1"]["state"] == "set-aside"
    assert rows["spaced-1"]["reason"] and rows["wrong-shape"]["connection"] == "gitlab"
    assert [r["delivery"] for r in sites.rows("--connection", "gitlab")] == ["wrong-shape"]
    table = system.sluice("deliveries", "list")
    header, *lines = table.splitlines()
    assert header.split() == ["CONNECTION", "DELIVERY", "EVENT", "RECEIVED", "REASON"]
    assert any(line.startswith("github") and "early-1" in line and "404" in line for line in lines)

    # the API: an admin's token for every tenant, as for other operator reads
    path = "/api/connection/github/deliveries"
    assert web.request("GET", path).status == 401
    assert web.request("GET", path, auth=token("demo")).status == 403
    listed = web.get(path, auth=token("*"))
    assert sorted(r["delivery"] for r in listed) == ["early-1", "spaced-1"]
    assert web.request("GET", "/api/connection/nowhere/deliveries", auth=token("*")).status == 404
    operation = web.get("/api/openapi.json")["paths"]["/api/connection/{connection}/deliveries"]
    assert operation["get"]["security"] == [{"bearer": []}]

    # GitHub has the pull request now: retried, it is translated and checked
    silent_pull(sites.github, 1)
    system.sluice("deliveries", "retry", "github", "early-1")
    wait_until(lambda: "success" in sites.github.statuses_of(pull), 60, "the retried check", 0.3)
    sites.quiet()
    system.sluice("deliveries", "discard", "gitlab", "wrong-shape")
    assert [r["delivery"] for r in sites.rows()] == ["spaced-1"]
    code, output = system.sluice_result("deliveries", "retry", "github", "early-1")
    assert code == 1 and "no set-aside delivery 'early-1'" in output


def checked(github: FakeGitHub, pull: Pull) -> None:
    wait_until(lambda: "success" in github.statuses_of(pull), 60, "the check's success", 0.3)


def test_an_unavailable_forge_defers_a_delivery_and_holds_back_none(system: SluiceSystem) -> None:
    with forges(system, RETRY + "    api_timeout: 1\n") as sites:
        github = sites.github
        for name in ("down", "normal"):
            branch(sites, name)
        # what translating a pull request's event reads: its reviews, its commits
        github.fault("GET", r"/pulls/1/commits\b", delay=3)  # no answer in time, once
        github.fault("GET", r"/pulls/2/reviews\b", 502, times=5)  # down for two attempts and more
        slow = github.open_pull("org/app", "fix", "GitHub too slow once")
        down = github.open_pull("org/app", "down", "GitHub down for it")
        normal = github.open_pull("org/app", "normal", "A normal change")
        for pull in (normal, slow):
            checked(github, pull)
        sites.quiet()
        (row,) = sites.rows()
        assert row["delivery"] and row["reason"].startswith("forge unavailable: GitHubError")
        assert "502" in row["reason"] and row["attempts"] == 2
        assert github.statuses_of(down) == []
        assert github.count("GET", r"/pulls/2/reviews\b") <= 2  # at most twice, never in a loop
