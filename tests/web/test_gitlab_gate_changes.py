"""A merge request that changes while it is queued, through a fake GitLab, on real workers.

* New commits pushed during the gate (GitLab's ``update`` with ``oldrev``)
  take the old version out (dequeue-on-new-patchset): nothing is merged.
* A merge request retargeted (an ``update`` with ``changes.target_branch``,
  no ``oldrev``) or closed while it is tested leaves the pipeline.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.e2e.system import SluiceSystem
from tests.fixtures.fake_gitlab import FakeGitLab, MergeRequest
from tests.fixtures.waiting import wait_until
from tests.web.server import WebServer
from tests.web.test_gitlab_journey import CONFIG, gitlab_web


def held(flag: Path) -> dict[str, str]:
    """The journey's config, its job waiting (a minute at most) for ``flag``."""
    wait = (
        f"#!/bin/sh\nfor i in $(seq 1 600); do test -e {flag} && exit 0; sleep 0.1; done\nexit 1\n"
    )
    return {**CONFIG, "ci/unit.sh": wait}


def items(web: WebServer, pipeline: str) -> list[dict[str, Any]]:
    status = web.get("/api/tenant/demo/status")
    (found,) = [p for p in status["pipelines"] if p["name"] == pipeline]
    return [i for q in found["change_queues"] for h in q["heads"] for i in h]


def ready(forge: FakeGitLab, mr: MergeRequest) -> None:
    forge.label(mr, "gate")
    forge.approve(mr)


def test_new_commits_during_the_gate_take_the_old_version_out(system: SluiceSystem) -> None:
    flag = system.root / "release"
    with gitlab_web(system, config=held(flag)) as (forge, web):
        flag.write_text("go\n")
        mr = forge.open("group/lib", "feature", "Add a feature")
        wait_until(lambda: "success" in forge.statuses_of(mr), 90, "the check", 0.5)
        flag.unlink()
        ready(forge, mr)
        wait_until(lambda: len(items(web, "gate")) == 1, 60, "the merge request in the gate", 0.3)
        forge.push(mr, {"more.py": "more = True\n", "feature.py": "x = 2\n"})
        wait_until(lambda: items(web, "gate") == [], 60, "the old version out of the gate", 0.3)
        flag.write_text("go\n")
        system.sluice("wait", "--idle", "--timeout", "60")
        assert not forge.merges
        gates = [b for b in system.buildsets() if b["pipeline"] == "gate"]
        assert [b["result"] for b in gates] == ["DEQUEUED"]


def test_retargeted_or_closed_while_queued_it_leaves(system: SluiceSystem) -> None:
    flag = system.root / "release"
    with gitlab_web(system, config=held(flag)) as (forge, web):
        base = system.repos.git("group/lib", "rev-parse", "main")
        forge.create_branch("group/lib", "stable", base)
        mr = forge.open("group/lib", "feature", "Add a feature")
        wait_until(lambda: len(items(web, "check")) == 1, 60, "the merge request in check", 0.3)
        forge.retarget(mr, "stable")
        wait_until(lambda: items(web, "check") == [], 60, "the retargeted one out", 0.3)

        forge.edit(mr, "Add a feature to stable")  # no new commits: nothing enqueued
        forge.retarget(mr, "main")
        forge.note(mr, "recheck")
        wait_until(lambda: len(items(web, "check")) == 1, 60, "rechecked for main", 0.3)
        forge.close(mr)
        wait_until(lambda: items(web, "check") == [], 60, "the closed one out", 0.3)
        flag.write_text("go\n")
        system.sluice("wait", "--idle", "--timeout", "60")
        assert [b["result"] for b in system.buildsets()] == ["DEQUEUED", "DEQUEUED"]
        assert not forge.merges


def test_a_merge_request_to_a_branch_pushed_into_being_is_checked(system: SluiceSystem) -> None:
    """A push that makes a branch reconfigures the tenant (as Zuul): the project runs
    jobs on it at once, and a merge request to it is checked without an operator."""
    with gitlab_web(system) as (forge, _web):
        base = system.repos.git("group/lib", "rev-parse", "main")
        forge.create_branch("group/lib", "stable", base)
        system.sluice("wait", "--idle", "--timeout", "60")
        mr = forge.open("group/lib", "feature", "Add a feature", target="stable")
        wait_until(lambda: "success" in forge.statuses_of(mr), 90, "the check on stable", 0.5)
        (buildset,) = system.buildsets()
        assert buildset["result"] == "SUCCESS"
