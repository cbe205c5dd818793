"""A merge request's journey through a fake GitLab, on real workers.

Opened → ``check`` runs → a success status and a note. Approved and
labelled ``gate`` → ``gate`` runs → GitLab merges it through its API.
The other ``test_gitlab_*`` journeys start from :func:`gitlab_web`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping

import pytest

from tests.e2e.system import SluiceSystem
from tests.fixtures.fake_gitlab import TOKEN, FakeGitLab
from tests.fixtures.waiting import wait_until
from tests.web.forges import forge_web
from tests.web.server import WebServer

SECRET = "gitlab-webhook-secret"
TENANT = """
- tenant:
    name: demo
    source:
      local:
        config-projects: [config]
      gitlab:
        untrusted-projects: [group/lib]
"""
CONFIG = {
    "zuul.d/pipelines.yaml": """
        - pipeline:
            name: check
            manager: independent
            trigger:
              gitlab:
                - event: gl_merge_request
                  action: [opened, changed]
                - event: gl_merge_request
                  action: comment
                  comment: (?i)^\\s*recheck\\s*$
            success:
              gitlab: {status: success, comment: true}
            failure:
              gitlab: {status: failure}
        - pipeline:
            name: gate
            manager: dependent
            trigger:
              gitlab:
                - event: gl_merge_request
                  action: [approved, labeled]
            require:
              gitlab:
                open: true
                approved: true
                labels: [gate]
            success:
              gitlab: {status: success, merge: true}
            failure:
              gitlab: {status: failure}
        - job:
            name: base
            parent: null
            timeout: 60
        - job:
            name: unit
            run: ci/unit.sh
        """,
    # a change adding more.py needs feature.py from the merge request it depends on
    "ci/unit.sh": "#!/bin/sh\nif [ -f more.py ]; then test -f feature.py; fi\n",
}
LIB = {
    ".zuul.yaml": """
        - project:
            check: {jobs: [unit]}
            gate: {jobs: [unit]}
        """,
    "lib.py": "value = 1\n",
}


@contextlib.contextmanager
def gitlab_web(
    system: SluiceSystem,
    prepare: Callable[[FakeGitLab], None] = lambda forge: None,
    config: Mapping[str, str] = CONFIG,
) -> Iterator[tuple[FakeGitLab, WebServer]]:
    """The fake GitLab (``prepare``d before any hook) with group/lib, its branch ``feature``."""
    forge = FakeGitLab(system.repos, "", SECRET)
    prepare(forge)
    branch = ("feature", {"feature.py": "x = 1\n"})
    with forge_web(
        system,
        forge,
        driver="gitlab",
        api_token=TOKEN,
        tenant=TENANT,
        config=config,
        project="group/lib",
        files=LIB,
        branch=branch,
    ) as web:
        yield forge, web


@pytest.fixture
def gitlab(system: SluiceSystem) -> Iterator[tuple[FakeGitLab, WebServer]]:
    with gitlab_web(system) as found:
        yield found


def test_a_merge_request_is_checked_then_gated_and_merged(
    gitlab: tuple[FakeGitLab, WebServer],
) -> None:
    forge, web = gitlab
    system = web.system
    mr = forge.open("group/lib", "feature", "Add a feature")
    wait_until(lambda: "success" in forge.statuses_of(mr), 90, "the check's status", 0.5)
    # the report sets the status, then writes the note: the note may come a moment later
    wait_until(
        lambda: any("unit: SUCCESS" in n["body"] for n in forge.notes), 30, "the check's note", 0.2
    )

    # a second merge request says in its commit message that it needs the first
    base = system.repos.git("group/lib", "rev-parse", "main")
    system.repos.commit(
        "group/lib",
        "more",
        {"more.py": "y = 2\n"},
        base=base,
        message="Add more\n\nDepends-On: https://gitlab.example.com/group/lib/-/merge_requests/1\n",
    )
    system.repos.git("group/lib", "checkout", "-q", "--detach")
    more = forge.open("group/lib", "more", "Add more")
    wait_until(lambda: "success" in forge.statuses_of(more), 90, "the dependent's check", 0.5)

    forge.label(mr, "gate")  # labelled, not approved: requirements not met
    system.sluice("wait", "--idle", "--timeout", "60")
    assert not forge.merges

    forge.approve(mr)
    wait_until(lambda: forge.merges, 90, "GitLab asked to merge", 0.5)
    system.sluice("wait", "--idle", "--timeout", "60")
    assert forge.merges[0]["sha"] == mr.sha(system.repos)
    # the check of the dependent ran on top of its dependency
    (check,) = [b for b in system.buildsets() if b["ref"].endswith("/2/head")]
    assert check["result"] == "SUCCESS"
    assert "feature.py" in system.repos.git("group/lib", "ls-tree", "--name-only", "main").split()
    gate = [s for s in forge.statuses if s["name"] == "demo/gate"]
    assert [s["state"] for s in gate] == ["success"]
