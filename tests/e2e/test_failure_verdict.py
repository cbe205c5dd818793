"""failure-verdict on real workers: a gate failure's job runs again and is judged."""

from __future__ import annotations

import json

from scheduler.stores.semaphores import SemaphoreNode
from scheduler.zk import paths
from scheduler.zk.client import ZooKeeperClient
from tests.e2e.system import SluiceSystem
from tests.e2e.test_gate import APP, MAIN_YAML, gate_config
from tests.e2e.test_nodeset import (
    NODES,
    _nodes_returned,
    client,  # noqa: F401 (a fixture)
)

VERDICT = gate_config("failure-verdict: true")


def test_a_culprit_is_judged_by_running_its_job_again(system: SluiceSystem) -> None:
    system.tenant(MAIN_YAML)
    system.repos.commit("config", "main", VERDICT)
    base = system.repos.commit("app", "main", APP)
    system.repos.commit("app", "c1", {"src/one.py": "1\n", "FAIL": "x\n"}, base=base)
    system.repos.commit("app", "c2", {"src/two.py": "2\n"}, base=base)
    system.repos.git("app", "checkout", "-q", "--detach")
    system.start_workers()
    system.sluice("reconfigure")
    for ref in ("c1", "c2"):
        system.enqueue(ref, "gate")
    system.sluice("wait", "--idle", "--timeout", "120")

    buildsets = {b["ref"]: b for b in system.buildsets()}
    assert {ref: b["result"] for ref, b in buildsets.items()} == {
        "c1": "FAILURE",
        "c2": "SUCCESS",
    }
    assert "verdict: culprit" in buildsets["c1"]["message"]
    assert buildsets["c1"]["reason"]["verdict"] == "culprit"
    builds = json.loads(system.sluice("builds", "--json"))
    (failed,) = [b for b in builds if b["ref"] == "c1"]
    assert failed["verdict"] == "culprit"
    assert "VERDICT" in system.sluice("builds") and "culprit" in system.sluice("builds")


NODE_APP = {
    ".zuul.yaml": """
        - semaphore:
            name: db
            max: 1
        - job:
            name: unit
            run: ci/unit.sh
            semaphores: [db]
            nodeset:
              nodes:
                - name: n1
                  label: ubuntu
        - project:
            gate:
              jobs: [unit]
        """,
    # runs on its node; a change fails its own test by adding a file named FAIL
    "ci/unit.sh": '#!/bin/sh\ncase "$SLUICE_NODES" in *h1.example.com*) ;; *) exit 2;; esac\n'
    "sleep 1\ntest ! -e FAIL\n",
    "src/app.py": "value = 1\n",
}


def test_a_job_with_a_nodeset_and_a_semaphore_is_judged_on_nodes_of_its_own(
    system: SluiceSystem,
    client: ZooKeeperClient,  # noqa: F811 (the fixture)
) -> None:
    system.config.write_text(system.config.read_text() + NODES)
    system.tenant(MAIN_YAML)
    system.repos.commit("config", "main", VERDICT)
    base = system.repos.commit("app", "main", NODE_APP)
    system.repos.commit("app", "c1", {"src/one.py": "1\n", "FAIL": "x\n"}, base=base)
    system.repos.commit("app", "c2", {"src/two.py": "2\n"}, base=base)
    system.repos.git("app", "checkout", "-q", "--detach")
    system.start_workers()
    system.start_worker(("launcher",), concurrency=1)
    system.sluice("reconfigure")
    for ref in ("c1", "c2"):
        system.enqueue(ref, "gate")
    system.sluice("wait", "--idle", "--timeout", "180")

    buildsets = {b["ref"]: b for b in system.buildsets()}
    assert {ref: b["result"] for ref, b in buildsets.items()} == {
        "c1": "FAILURE",
        "c2": "SUCCESS",
    }
    # both re-runs ran on a node of their own, one after the other (the semaphore of one)
    assert buildsets["c1"]["reason"]["verdict"] == "culprit", buildsets["c1"]["message"]
    _nodes_returned(client)
    assert SemaphoreNode(client, paths.semaphore("demo", "db")).holders() == []
