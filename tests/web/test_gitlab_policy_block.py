"""GitLab refuses to merge a draft (405): a policy block, reported with GitLab's words."""

from __future__ import annotations

from tests.e2e.system import SluiceSystem
from tests.fixtures.waiting import wait_until
from tests.web.test_gitlab_journey import gitlab_web


def test_a_refused_merge_is_reported_once(system: SluiceSystem) -> None:
    with gitlab_web(system) as (forge, _):
        mr = forge.open("group/lib", "feature", "Draft: Add a feature")
        wait_until(lambda: "success" in forge.statuses_of(mr), 90, "the check's status", 0.5)
        forge.label(mr, "gate")
        forge.approve(mr)
        wait_until(lambda: forge.count("PUT", r"/merge$"), 90, "the merge asked for", 0.5)
        system.sluice("wait", "--idle", "--timeout", "60")
        assert not forge.merges and mr.state == "opened"
        assert forge.count("PUT", r"/merge$") == 1  # a policy block is not tried again
        # reported before the merge, as Zuul does; then the refusal, GitLab's words in it
        gate = [s["state"] for s in forge.statuses if s["name"] == "demo/gate"]
        assert gate == ["success", "failed"]
        reports = [n["body"] for n in forge.notes if "demo/gate" in n["body"]]
        assert "405 Method Not Allowed" in reports[-1]
