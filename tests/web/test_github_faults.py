"""A GitHub that stumbles during a journey, on real workers: the change still lands, once.

* A 502 on the report's comment and a timeout on its status: the report is
  tried again later (the item waits at the head) and each lands once.
* A secondary rate limit (403 with ``Retry-After``) on the reviews read
  and on the merge: waited out, then done.
* A 502 on the merge: asked again, merged once.
"""

from __future__ import annotations

from tests.e2e.system import SluiceSystem
from tests.fixtures.waiting import wait_until
from tests.web.test_github_gate_order import checked, gate_comments, gate_statuses, ready
from tests.web.test_github_journey import CONFIG, forge_system


def test_a_stumbling_github_delays_the_journey_and_nothing_lands_twice(
    system: SluiceSystem,
) -> None:
    with forge_system(system, CONFIG, options="    api_timeout: 2\n") as (forge, _web):
        forge.fault("POST", r"/issues/1/comments$", 502)  # the check's comment, once
        forge.fault("POST", r"/statuses/", delay=3.0)  # the start status: answered too late
        forge.fault("GET", r"/reviews\?", 403, headers={"Retry-After": "1"})  # a secondary limit
        # the sweep, which nudges a pipeline whose report did not land
        system.start_worker(("maintenance",), env={"SLUICE_SWEEP_INTERVAL": "1"}, beat=True)
        pull = forge.open_pull("org/app", "fix", "Fix the thing")
        wait_until(lambda: checked(forge, pull), 120, "the check's success", 0.5)

        def commented() -> bool:
            return any("unit: SUCCESS" in c["body"] for c in forge.comments if c["number"] == 1)

        wait_until(commented, 60, "the check's comment, after the 502", 0.5)
        check_comments = [c for c in forge.comments if "demo/check" in c["body"]]
        assert len(check_comments) == 1
        assert forge.count("POST", r"/issues/1/comments$") == 2  # the 502, then the comment
        assert forge.count("GET", r"/reviews$") >= 2  # the rate limit, then the answer

        forge.fault("PUT", r"/merge$", 502)
        forge.fault("PUT", r"/merge$", 403, headers={"Retry-After": "1"})
        ready(forge, pull)
        wait_until(lambda: forge.merges, 120, "merged after the 502 and the rate limit", 0.5)
        system.sluice("wait", "--idle", "--timeout", "60")
        assert len(forge.merges) == 1
        assert forge.count("PUT", r"/merge$") == 3
        assert gate_statuses(forge) == ["success"]
        assert len(gate_comments(forge, pull)) == 1
        results = {b["pipeline"]: b["result"] for b in system.buildsets()}
        assert results == {"check": "SUCCESS", "gate": "SUCCESS"}
