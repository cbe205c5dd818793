"""``approved`` is GitLab's verdict: a merge request needing two approvals waits for both."""

from __future__ import annotations

from tests.e2e.system import SluiceSystem
from tests.fixtures.waiting import wait_until
from tests.web.test_gitlab_journey import gitlab_web


def test_one_approval_of_two_does_not_gate(system: SluiceSystem) -> None:
    with gitlab_web(system, lambda forge: forge.require_approvals("group/lib", 2)) as (forge, _):
        mr = forge.open("group/lib", "feature", "Add a feature")
        wait_until(lambda: "success" in forge.statuses_of(mr), 90, "the check's status", 0.5)
        forge.approve(mr, "alice")  # GitLab: "approval", one left
        forge.label(mr, "gate")  # "labeled" triggers the gate: approved by one is not enough
        system.sluice("wait", "--idle", "--timeout", "60")
        assert "gate" not in [b["pipeline"] for b in system.buildsets()]
        assert not forge.merges

        forge.approve(mr, "bob")  # GitLab: "approved", none left
        wait_until(lambda: forge.merges, 90, "GitLab asked to merge", 0.5)
        system.sluice("wait", "--idle", "--timeout", "60")
        assert forge.merges == [{"project": "group/lib", "iid": 1, "sha": mr.sha(system.repos)}]
