"""A gate that tests changes in batches and bisects a failed one, on real workers."""

from __future__ import annotations

from tests.e2e.system import SluiceSystem
from tests.e2e.test_gate import MAIN_YAML
from tests.e2e.test_gate_more import _merged_order

BATCHED = {
    "zuul.d/pipelines.yaml": """
        - pipeline:
            name: gate
            manager: dependent
            batch: {size: 8, max-wait: 60}
            success:
              local:
                merge: true
        - job:
            name: base
            parent: null
            timeout: 120
        """,
}

APP = {
    ".zuul.yaml": """
        - job:
            name: unit
            run: ci/unit.sh
        - project:
            gate:
              jobs: [unit]
        """,
    # a change fails its own test by adding a file named FAIL
    "ci/unit.sh": "#!/bin/sh\ntest ! -e FAIL\n",
}
REFS = [f"c{n}" for n in range(1, 9)]


def test_a_batch_of_eight_with_one_culprit_merges_seven_in_order(system: SluiceSystem) -> None:
    system.tenant(MAIN_YAML)
    system.repos.commit("config", "main", BATCHED)
    base = system.repos.commit("app", "main", APP)
    for ref in REFS:
        files = {f"src/{ref}.py": "x\n", **({"FAIL": "x\n"} if ref == "c3" else {})}
        system.repos.commit("app", ref, files, base=base)
    system.repos.git("app", "checkout", "-q", "--detach")  # the merge queue pushes to main
    system.start_workers()
    system.sluice("reconfigure")
    for ref in REFS:
        system.enqueue(ref, "gate")
    system.sluice("wait", "--idle", "--timeout", "180")

    results = {b["ref"]: b["result"] for b in system.buildsets()}
    assert results == {ref: "FAILURE" if ref == "c3" else "SUCCESS" for ref in REFS}
    (culprit,) = [b for b in system.buildsets() if b["ref"] == "c3"]
    assert "culprit" in culprit["message"]
    assert _merged_order(system, base) == [r for r in REFS if r != "c3"]
    # one buildset for the eight, then the halves: far fewer builds than one a change
    # plus its retests behind the failure
    assert len(system.builds()) < len(REFS)
