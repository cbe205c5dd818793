"""failure-verdict on real workers: a gate failure's job runs again and is judged."""

from __future__ import annotations

import json

from tests.e2e.system import SluiceSystem
from tests.e2e.test_gate import APP, MAIN_YAML, gate_config

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
