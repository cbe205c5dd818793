"""failure-output on real workers: a gate item pre-fails and the item behind is reset
onto the branch tip, tested and merged before the pre-failed build ends."""

from __future__ import annotations

import json
from typing import Any

from tests.e2e.system import TENANT_YAML, SluiceSystem
from tests.e2e.test_gate import CONFIG, main_files
from tests.fixtures.waiting import wait_until


def app(go: str) -> dict[str, str]:
    # a change holding a file named FAIL says so at once, then waits for the test
    script = (
        "#!/bin/sh\n"
        "echo unit starts\n"
        "if [ -e FAIL ]; then\n"
        "  echo 'UNIT FAILED: test_feature'\n"
        f"  for i in $(seq 1 1200); do test -e {go} && break; sleep 0.1; done\n"
        "  exit 1\n"
        "fi\n"
    )
    return {
        ".zuul.yaml": """
            - job:
                name: unit
                run: ci/unit.sh
                failure-output: '^UNIT FAILED: '
            - project:
                gate:
                  jobs: [unit]
            """,
        "ci/unit.sh": script,
        "src/app.py": "value = 1\n",
    }


def gate_items(system: SluiceSystem) -> dict[str, dict[str, Any]]:
    status = json.loads(system.sluice("status", "--json"))
    return {
        item["ref"]: item
        for tenant in status["tenants"]
        for pipeline in tenant["pipelines"]
        if pipeline["name"] == "gate"
        for queue in pipeline["queues"]
        for item in queue["items"]
    }


def test_a_pre_failed_item_lets_the_item_behind_merge_before_it_ends(
    system: SluiceSystem,
) -> None:
    go = system.root / "go"
    system.tenant(TENANT_YAML)
    system.repos.commit("config", "main", CONFIG)
    base = system.repos.commit("app", "main", app(str(go)))
    system.repos.git("app", "checkout", "-q", "--detach")  # the merge queue pushes to main
    system.repos.commit("app", "c1", {"src/one.py": "1\n", "FAIL": "x\n"}, base=base)
    system.repos.commit("app", "c2", {"src/two.py": "2\n"}, base=base)
    system.repos.git("app", "checkout", "-q", "--detach")
    # builds that wait must not take the slots the scheduler needs
    system.start_worker(("scheduler", "merger", "maintenance"))
    system.start_worker(("executor",), concurrency=3)
    system.sluice("reconfigure")
    system.enqueue("c1", "gate")
    system.enqueue("c2", "gate")

    def c1_pre_failed() -> bool:
        (job,) = gate_items(system).get("c1", {"jobs": [{}]})["jobs"]
        return bool(job.get("pre_fail"))

    wait_until(c1_pre_failed, 90, "c1's build to pre-fail")
    (job,) = gate_items(system)["c1"]["jobs"]
    assert job["result"] is None and job["state"] == "running"

    # c2, reset onto the branch tip, passes and merges while c1's build still runs
    def c2_merged() -> bool:
        return any(b["ref"] == "c2" and b["result"] == "SUCCESS" for b in system.buildsets())

    wait_until(c2_merged, 90, "c2 to pass on the branch tip and merge")
    assert not go.exists()
    (job,) = gate_items(system)["c1"]["jobs"]
    assert job["pre_fail"] is True and job["result"] is None
    assert "src/two.py" in main_files(system)

    go.touch()
    system.sluice("wait", "--idle", "--timeout", "120")
    results = {b["ref"]: b["result"] for b in system.buildsets()}
    assert results == {"c1": "FAILURE", "c2": "SUCCESS"}
    files = main_files(system)
    assert "src/two.py" in files and "src/one.py" not in files
    c1_builds = [b for b in system.builds() if b["ref"] == "c1"]
    assert [b["result"] for b in c1_builds] == ["FAILURE"]
