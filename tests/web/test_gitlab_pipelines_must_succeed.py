"""GitLab's "pipelines must succeed": the gate reports its status, then merges.

With ``only_allow_merge_if_pipeline_succeeds`` on, GitLab answers the merge
405 until the head's commit statuses are all ``success``: an approved,
gated merge request is merged only if the gate's success status is set
before the merge is asked for (as Zuul reports, then merges).
"""

from __future__ import annotations

from tests.e2e.system import SluiceSystem
from tests.fixtures.waiting import wait_until
from tests.web.test_gitlab_journey import gitlab_web


def test_an_approved_merge_request_is_merged(system: SluiceSystem) -> None:
    with gitlab_web(system, lambda forge: forge.require_pipeline("group/lib")) as (forge, _):
        mr = forge.open("group/lib", "feature", "Add a feature")
        wait_until(lambda: "success" in forge.statuses_of(mr), 90, "the check's status", 0.5)
        forge.label(mr, "gate")
        forge.approve(mr)
        system.sluice("wait", "--idle", "--timeout", "90")
        gate = [s["state"] for s in forge.statuses if s["name"] == "demo/gate"]
        assert gate and gate[-1] == "success"
        assert forge.merges == [{"project": "group/lib", "iid": 1, "sha": mr.sha(system.repos)}]
        assert mr.state == "merged"
        assert forge.count("PUT", r"/merge$") == 1  # no 405 on the way
