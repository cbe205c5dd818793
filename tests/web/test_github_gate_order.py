"""The gate as a protected branch meets it, through a fake GitHub, on real workers.

* A branch that requires the gate's status merges: Sluice reports the
  success (status, then comment) before it asks GitHub to merge, as Zuul.
* A merge GitHub refuses (a required check Sluice does not report) fails
  the change with GitHub's own words, and nothing is merged.
* A change approved before the change it depends on enters the gate behind
  it when the dependency does (Zuul's enqueue of changes behind).
* A force-push during the gate takes the old version out (dequeue-on-new-
  patchset): it is not merged, and the new head is not merged untested.
"""

from __future__ import annotations

from tests.e2e.system import SluiceSystem
from tests.fixtures.fake_github import FakeGitHub, Pull
from tests.fixtures.waiting import wait_until
from tests.web.test_github_journey import CONFIG, forge_system


def gate_statuses(forge: FakeGitHub) -> list[str]:
    return [s["state"] for s in forge.statuses if s["context"] == "demo/gate"]


def gate_comments(forge: FakeGitHub, pull: Pull) -> list[str]:
    return [c["body"] for c in forge.comments if c["number"] == pull.number and "gate" in c["body"]]


def checked(forge: FakeGitHub, pull: Pull) -> bool:
    return "success" in forge.statuses_of(pull)


def ready(forge: FakeGitHub, pull: Pull, *, notify: bool = True) -> None:
    """Approved and labelled ``gate``: the gate's requirements met."""
    forge.approve(pull, notify=False)
    forge.label(pull, "gate", notify=notify)


def test_a_branch_that_requires_the_gate_merges_and_refusals_are_reported(
    system: SluiceSystem,
) -> None:
    with forge_system(system, CONFIG) as (forge, _web):
        forge.protect("org/app", "main", ["demo/gate"])
        pull = forge.open_pull("org/app", "fix", "Fix the thing")
        wait_until(lambda: checked(forge, pull), 90, "the check", 0.5)
        events: list[str] = []
        merge = forge.merge

        def recorded_merge(project: str, number: int, sha: str, method: str) -> tuple[int, object]:
            events.append(f"merge after {gate_statuses(forge)} {len(gate_comments(forge, pull))}")
            return merge(project, number, sha, method)

        forge.merge = recorded_merge  # type: ignore[method-assign]
        ready(forge, pull)
        wait_until(lambda: forge.merges, 90, "GitHub merged the protected branch", 0.5)
        system.sluice("wait", "--idle", "--timeout", "60")
        # the status, then the comment, then the merge: once each
        assert events == ["merge after ['success'] 1"]
        assert gate_statuses(forge) == ["success"]
        (comment,) = gate_comments(forge, pull)
        assert "unit: SUCCESS" in comment
        (buildset,) = [b for b in system.buildsets() if b["pipeline"] == "gate"]
        assert buildset["result"] == "SUCCESS"
        status = next(s for s in forge.statuses if s["context"] == "demo/gate")
        assert status["target_url"].endswith(f"/t/demo/buildset/{buildset['uuid']}")

        # a required check nobody reports: GitHub refuses (405), the change fails with its words
        forge.protect("org/app", "main", ["demo/gate", "ci/other"])
        base = system.repos.git("org/app", "rev-parse", "main")
        system.repos.commit("org/app", "more", {"src/more.py": "more = 1\n"}, base=base)
        system.repos.git("org/app", "checkout", "-q", "--detach")
        second = forge.open_pull("org/app", "more", "More")
        wait_until(lambda: checked(forge, second), 90, "the second check", 0.5)
        ready(forge, second)

        def refused() -> bool:
            return any("ci/other" in c for c in gate_comments(forge, second))

        wait_until(refused, 90, "the refusal reported", 0.5)
        system.sluice("wait", "--idle", "--timeout", "60")
        assert len(forge.merges) == 1
        (said,) = [c for c in gate_comments(forge, second) if "ci/other" in c]
        assert 'Required status check "ci/other" is expected.' in said
        assert "the forge will not merge it" in said
        assert forge.statuses_of(second)[-1] == "failure"


def test_a_change_approved_before_its_dependency_follows_it_into_the_gate(
    system: SluiceSystem,
) -> None:
    deps = dict(CONFIG)
    deps["ci/unit.sh"] = "#!/bin/sh\nif [ -f src/two.py ]; then test -f src/one.py; fi\n"
    with forge_system(system, deps) as (forge, _web):
        base = system.repos.git("org/app", "rev-parse", "main")
        system.repos.commit("org/app", "one", {"src/one.py": "1\n"}, base=base)
        system.repos.commit("org/app", "two", {"src/two.py": "2\n"}, base=base)
        system.repos.git("org/app", "checkout", "-q", "--detach")
        first = forge.open_pull("org/app", "one", "One")
        second = forge.open_pull(
            "org/app", "two", "Two", body="Depends-On: https://github.com/org/app/pull/1\n"
        )
        wait_until(lambda: checked(forge, first) and checked(forge, second), 90, "checks", 0.5)

        ready(forge, second)  # the dependent first: it waits for its dependency
        system.sluice("wait", "--idle", "--timeout", "60")
        assert not forge.merges
        assert [b["pipeline"] for b in system.buildsets()].count("gate") == 0

        ready(forge, first)  # the dependency: it enters, and the dependent behind it
        wait_until(lambda: len(forge.merges) == 2, 60, "both merged", 0.5)
        system.sluice("wait", "--idle", "--timeout", "60")
        assert [m["number"] for m in forge.merges] == [1, 2]
        gates = [b for b in system.buildsets() if b["pipeline"] == "gate"]
        assert sorted(b["result"] for b in gates) == ["SUCCESS", "SUCCESS"]


def test_a_force_push_during_the_gate_takes_the_old_version_out(system: SluiceSystem) -> None:
    flag = system.root / "release"
    held = dict(CONFIG)
    held["ci/unit.sh"] = (
        f"#!/bin/sh\nfor i in $(seq 1 600); do test -e {flag} && exit 0; sleep 0.1; done\nexit 1\n"
    )
    with forge_system(system, held) as (forge, web):
        flag.write_text("go\n")
        pull = forge.open_pull("org/app", "fix", "Fix the thing")
        wait_until(lambda: checked(forge, pull), 90, "the check", 0.5)
        flag.unlink()

        def gate_items() -> list[dict[str, object]]:
            status = web.get("/api/tenant/demo/status")
            (gate,) = [p for p in status["pipelines"] if p["name"] == "gate"]
            return [i for q in gate["change_queues"] for h in q["heads"] for i in h]

        ready(forge, pull)
        wait_until(lambda: len(gate_items()) == 1, 60, "the pull request in the gate", 0.3)
        forge.push(pull, {"src/more.py": "more = True\n"})  # a force-push while it is tested
        wait_until(lambda: gate_items() == [], 60, "the old version out of the gate", 0.3)
        flag.write_text("go\n")
        system.sluice("wait", "--idle", "--timeout", "60")
        assert not forge.merges
        gates = [b for b in system.buildsets() if b["pipeline"] == "gate"]
        assert [b["result"] for b in gates] == ["DEQUEUED"]
        assert "success" not in gate_statuses(forge)


def test_a_pull_request_retargeted_while_queued_leaves(system: SluiceSystem) -> None:
    """Its base branch edited (GitHub's ``edited`` with ``changes.base``): tested for
    the old branch, the item leaves, as when it is closed."""
    flag = system.root / "release"
    held = dict(CONFIG)
    held["ci/unit.sh"] = (
        f"#!/bin/sh\nfor i in $(seq 1 600); do test -e {flag} && exit 0; sleep 0.1; done\nexit 1\n"
    )
    with forge_system(system, held) as (forge, web):
        base = system.repos.git("org/app", "rev-parse", "main")
        system.repos.git("org/app", "branch", "stable", base)
        pull = forge.open_pull("org/app", "fix", "Fix the thing")

        def check_items() -> list[dict[str, object]]:
            status = web.get("/api/tenant/demo/status")
            (check,) = [p for p in status["pipelines"] if p["name"] == "check"]
            return [i for q in check["change_queues"] for h in q["heads"] for i in h]

        wait_until(lambda: len(check_items()) == 1, 60, "the pull request in check", 0.3)
        pull.base = "stable"
        changes = {"base": {"ref": {"from": "main"}, "sha": {"from": base}}}
        forge.send(
            "pull_request",
            {"action": "edited", "changes": changes, "pull_request": pull.to_api(system.repos)},
            "org/app",
        )
        wait_until(lambda: check_items() == [], 60, "the retargeted pull request out", 0.3)
        flag.write_text("go\n")
        system.sluice("wait", "--idle", "--timeout", "60")
        (buildset,) = system.buildsets()
        assert buildset["result"] == "DEQUEUED"
        assert "success" not in forge.statuses_of(pull)
