"""A pull request's journey through a fake GitHub, on real workers.

Opened → ``check`` runs → a success status and a comment are posted.
Approved, then labelled ``gate`` → the gate's requirements are met → ``gate``
runs → GitHub merges the pull request (its merge API), the base branch has
the change, and the status says so.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from tests.e2e.system import SluiceSystem
from tests.fixtures.fake_github import TOKEN, FakeGitHub, Pull
from tests.fixtures.waiting import wait_until
from tests.web.forges import forge_web
from tests.web.server import WebServer

SECRET = "github-webhook-secret"
TENANT = """
- tenant:
    name: demo
    source:
      local:
        config-projects: [config]
      github:
        untrusted-projects: [org/app]
"""
CONFIG = {
    "zuul.d/pipelines.yaml": r"""
        - pipeline:
            name: check
            manager: independent
            trigger:
              github:
                - event: pull_request
                  action: [opened, changed]
                - event: pull_request
                  action: comment
                  comment: (?i)^\s*recheck\s*$
            start:
              github: {status: pending}
            success:
              github: {status: success, check: success}
            failure:
              github: {status: failure, check: failure}
        - pipeline:
            name: gate
            manager: dependent
            trigger:
              github:
                - event: pull_request
                  action: labeled
                  label: gate
                - event: pull_request_review
                  action: submitted
                  state: approved
            require:
              github:
                open: true
                label: [gate]
                review: [{type: approved}]
                status: ['demo/check:success']
            success:
              github: {status: success, merge: true}
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
APP = {
    ".zuul.yaml": """
        - project:
            check: {jobs: [unit]}
            gate: {jobs: [unit]}
        """,
    "src/app.py": "value = 1\n",
}


@pytest.fixture
def github(system: SluiceSystem) -> Iterator[tuple[FakeGitHub, WebServer]]:
    with forge_system(system, CONFIG) as found:
        yield found


@contextlib.contextmanager
def forge_system(
    system: SluiceSystem,
    config: dict[str, str],
    options: str = "",
    *,
    app: bool = False,
    private: bool = False,
) -> Iterator[tuple[FakeGitHub, WebServer]]:
    """The fake GitHub as connection ``github``, with a token or (``app``) as a GitHub App.

    The App's key is ``app.pem`` beside sluice.yaml, named relative to it.
    ``private``: ``org/app`` is cloned from the fake's git over HTTP, which
    asks for a token.
    """
    forge = FakeGitHub(system.repos, "", SECRET)
    if app:
        forge.make_app(system.config.parent / "app.pem")
        options += "    app_id: 7\n    app_key: app.pem\n"
    if private:
        forge.private.add("org/app")
        options += f"    baseurl: {forge.address}\n"  # the last one given counts
    branch = ("fix", {"src/fix.py": "fixed = True\n"})
    with forge_web(
        system,
        forge,
        driver="github",
        api_token="" if app else TOKEN,
        tenant=TENANT,
        config=config,
        project="org/app",
        files=APP,
        branch=branch,
        options=options,
    ) as web:
        yield forge, web


def final(forge: FakeGitHub, pull: Pull) -> list[str]:
    """The statuses of a pull request's head but ``pending`` (the start report)."""
    return [s for s in forge.statuses_of(pull) if s != "pending"]


def test_a_pull_request_is_checked_then_gated_and_merged(
    github: tuple[FakeGitHub, WebServer],
) -> None:
    forge, web = github
    system = web.system
    pull = forge.open_pull("org/app", "fix", "Fix the thing")
    wait_until(lambda: "success" in forge.statuses_of(pull), 90, "the check's success status", 0.5)
    checks = [s["state"] for s in forge.statuses if s["context"] == "demo/check"]
    assert checks == ["pending", "success"]  # start:, then success:
    # the report sets the status first; its comment may come a moment later
    wait_until(
        lambda: any("unit: SUCCESS" in c["body"] for c in forge.comments if c["number"] == 1),
        30,
        "the check's comment",
        0.2,
    )
    # a personal token may not write check runs (GitHub's 403): asked once, then left out
    assert forge.check_runs == []
    assert forge.count("POST", "/check-runs$") == 1
    forge.comment(pull, "looks good")  # not a recheck: nothing runs
    forge.comment(pull, "recheck")
    wait_until(lambda: len(system.buildsets()) == 2, 60, "a recheck", 0.5)

    forge.approve(pull)  # approved, but not labelled: the gate's requirements are not met
    system.sluice("wait", "--idle", "--timeout", "60")
    assert not forge.merges
    assert [b["pipeline"] for b in system.buildsets()] == ["check", "check"]

    forge.label(pull, "gate")
    wait_until(lambda: forge.merges, 90, "GitHub asked to merge the pull request", 0.5)
    system.sluice("wait", "--idle", "--timeout", "60")
    (merge,) = forge.merges
    assert merge["number"] == 1 and merge["sha"] == pull.sha(system.repos)
    files = system.repos.git("org/app", "ls-tree", "-r", "--name-only", "main").split()
    assert "src/fix.py" in files
    gate = [s for s in forge.statuses if s["context"] == "demo/gate"]
    assert [s["state"] for s in gate] == ["success"]
    assert sorted(b["pipeline"] for b in system.buildsets()) == ["check", "check", "gate"]
    assert forge.unauthorized == 0


def test_a_new_patchset_supersedes_and_closing_dequeues(system: SluiceSystem) -> None:
    flag = system.root / "release"
    held = dict(CONFIG)
    held["ci/unit.sh"] = (
        f"#!/bin/sh\nfor i in $(seq 1 600); do test -e {flag} && exit 0; sleep 0.1; done\nexit 1\n"
    )
    with forge_system(system, held) as (forge, web):
        pull = forge.open_pull("org/app", "fix", "Fix the thing")

        def check_items() -> list[dict[str, object]]:
            status = web.get("/api/tenant/demo/status")
            (check,) = [p for p in status["pipelines"] if p["name"] == "check"]
            return [i for q in check["change_queues"] for h in q["heads"] for i in h]

        wait_until(lambda: len(check_items()) == 1, 60, "the pull request in check", 0.3)
        first = check_items()[0]["commit"]
        forge.push(pull, {"src/more.py": "more = True\n"})  # synchronize: a new patchset

        def superseded() -> bool:
            items = check_items()
            return len(items) == 1 and items[0]["commit"] != first

        wait_until(superseded, 60, "the new patchset replacing the old", 0.3)
        forge.close(pull)
        wait_until(lambda: check_items() == [], 60, "the closed pull request dequeued", 0.3)
        flag.write_text("go\n")
        system.sluice("wait", "--idle", "--timeout", "60")
        assert sorted(b["result"] for b in system.buildsets()) == ["DEQUEUED", "DEQUEUED"]
        assert "success" not in forge.statuses_of(pull)


def test_depends_on_in_check_and_gate(system: SluiceSystem) -> None:
    deps = dict(CONFIG)
    # a change adding two.py needs one.py from the change it depends on
    deps["ci/unit.sh"] = "#!/bin/sh\nif [ -f src/two.py ]; then test -f src/one.py; fi\n"
    with forge_system(system, deps) as (forge, _web):
        base = system.repos.git("org/app", "rev-parse", "main")
        system.repos.commit("org/app", "one", {"src/one.py": "1\n"}, base=base)
        system.repos.commit("org/app", "two", {"src/two.py": "2\n"}, base=base)
        system.repos.git("org/app", "checkout", "-q", "--detach")
        first = forge.open_pull("org/app", "one", "One")
        second = forge.open_pull(
            "org/app",
            "two",
            "Two",
            body="Needs one.\n\nDepends-On: https://github.com/org/app/pull/1\n",
        )
        wait_until(lambda: final(forge, second), 90, "the check of the dependent change", 0.5)
        assert final(forge, second) == ["success"]  # tested with its dependency

        # the dependency is ready (its webhooks were missed); the dependent is triggered
        forge.approve(first, notify=False)
        forge.label(first, "gate", notify=False)
        forge.approve(second)
        forge.label(second, "gate")
        wait_until(lambda: len(forge.merges) == 2, 90, "both merged by GitHub", 0.5)
        system.sluice("wait", "--idle", "--timeout", "60")
        assert [m["number"] for m in forge.merges] == [1, 2]  # the dependency first
        files = system.repos.git("org/app", "ls-tree", "-r", "--name-only", "main").split()
        assert {"src/one.py", "src/two.py"} <= set(files)

        # a pull request that depends on itself is a cycle: an error, reported
        system.repos.commit("org/app", "loop", {"src/loop.py": "3\n"}, base=base)
        system.repos.git("org/app", "checkout", "-q", "--detach")
        loop = forge.open_pull(
            "org/app", "loop", "Loop", body="Depends-On: https://github.com/org/app/pull/3"
        )
        wait_until(lambda: forge.statuses_of(loop), 60, "the cycle reported", 0.5)
        assert forge.statuses_of(loop) == ["failure"]

        def cycle_said() -> bool:
            return any(
                "Dependency cycle detected" in c["body"] for c in forge.comments if c["number"] == 3
            )

        wait_until(cycle_said, 30, "the cycle's comment", 0.2)

        # a branch made from another pull request's branch depends on it (git parents)
        main = system.repos.git("org/app", "rev-parse", "main")
        parent = system.repos.commit("org/app", "four", {"src/four.py": "4\n"}, base=main)
        system.repos.commit("org/app", "five", {"src/five.py": "5\n"}, base=parent)
        system.repos.git("org/app", "checkout", "-q", "--detach")
        four = forge.open_pull("org/app", "four", "Four")
        five = forge.open_pull("org/app", "five", "Five")
        wait_until(lambda: final(forge, five) and final(forge, four), 90, "checks", 0.5)
        forge.approve(four, notify=False)
        forge.label(four, "gate", notify=False)
        forge.approve(five)
        forge.label(five, "gate")
        wait_until(lambda: len(forge.merges) == 4, 90, "the parent and the child merged", 0.5)
        assert [m["number"] for m in forge.merges][2:] == [4, 5]


def test_a_merge_whose_answer_is_lost_still_counts(system: SluiceSystem) -> None:
    """GitHub merged, but its answer came after the client's deadline: the merger
    asks again, finds the pull request merged as tested, and the gate succeeds once."""
    with forge_system(system, CONFIG, options="    api_timeout: 1\n") as (forge, _web):
        forge.merge_delay = 2.5
        pull = forge.open_pull("org/app", "fix", "Fix the thing")
        wait_until(lambda: "success" in forge.statuses_of(pull), 90, "the check", 0.5)
        forge.approve(pull, notify=False)
        forge.label(pull, "gate")
        wait_until(
            lambda: any(s["context"] == "demo/gate" for s in forge.statuses), 90, "the gate", 0.5
        )
        system.sluice("wait", "--idle", "--timeout", "60")
        assert len(forge.merges) == 1
        gate = [s["state"] for s in forge.statuses if s["context"] == "demo/gate"]
        assert gate == ["success"]
        assert {b["pipeline"]: b["result"] for b in system.buildsets()}["gate"] == "SUCCESS"
