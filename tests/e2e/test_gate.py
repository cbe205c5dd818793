"""A dependent (gate) pipeline with the git merge queue, end to end on real parts."""

from __future__ import annotations

import pytest

from tests.e2e.system import TENANT_YAML, SluiceSystem
from tests.fixtures.waiting import wait_until

MAIN_YAML = TENANT_YAML


def gate_config(*options: str) -> dict[str, str]:
    """A gate that merges, with ``options`` (lines such as ``batch: {size: 4}``) added."""
    extra = "".join(f"\n            {option}" for option in options)
    return {
        "zuul.d/pipelines.yaml": f"""
        - pipeline:
            name: gate
            manager: dependent{extra}
            success:
              local:
                merge: true
        - job:
            name: base
            parent: null
            timeout: 120
        """,
    }


CONFIG = gate_config()

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
    "ci/unit.sh": "#!/bin/sh\nsleep 1\ntest ! -e FAIL\n",
    "src/app.py": "value = 1\n",
}


@pytest.fixture
def gate(system: SluiceSystem) -> SluiceSystem:
    system.tenant(MAIN_YAML)
    system.repos.commit("config", "main", CONFIG)
    system.base = system.repos.commit("app", "main", APP)  # type: ignore[attr-defined]
    system.repos.git("app", "checkout", "-q", "--detach")  # the merge queue pushes to main
    return system


def change(system: SluiceSystem, ref: str, files: dict[str, str]) -> None:
    system.repos.commit("app", ref, files, base=system.base)  # type: ignore[attr-defined]
    system.repos.git("app", "checkout", "-q", "--detach")


def enqueue(system: SluiceSystem, ref: str) -> str:
    return system.enqueue(ref, "gate")


def main_files(system: SluiceSystem) -> list[str]:
    return sorted(system.repos.git("app", "ls-tree", "-r", "--name-only", "main").split())


def test_a_gate_of_three_where_the_middle_fails(gate: SluiceSystem) -> None:
    change(gate, "c1", {"src/one.py": "1\n"})
    change(gate, "c2", {"src/two.py": "2\n", "FAIL": "x\n"})
    change(gate, "c3", {"src/three.py": "3\n"})
    gate.start_workers()
    gate.sluice("reconfigure")
    for ref in ("c1", "c2", "c3"):
        enqueue(gate, ref)
    gate.sluice("wait", "--idle", "--timeout", "120")

    results = {b["ref"]: b["result"] for b in gate.buildsets()}
    assert results == {"c1": "SUCCESS", "c2": "FAILURE", "c3": "SUCCESS"}
    # one host: the executor borrows the merger's objects, it never merges again
    assert not any("merged again here" in w.log_text() for w in gate.started)
    files = main_files(gate)
    assert "src/one.py" in files and "src/three.py" in files
    assert "src/two.py" not in files and "FAIL" not in files
    # merged in queue order: c1's merge is an ancestor of c3's on main
    log = gate.repos.git("app", "log", "--format=%s", "main").splitlines()
    assert sum("c1" in line for line in log) >= 1
    assert [b["result"] for b in gate.builds() if b["ref"] == "c3"][-1] == "SUCCESS"


def test_the_target_branch_moved_outside_sluice(gate: SluiceSystem) -> None:
    go = gate.root / "go"
    started = gate.root / "started"
    script = f"#!/bin/sh\ntouch {started}\nwhile [ ! -e {go} ]; do sleep 0.1; done\n"
    change(gate, "c1", {"src/one.py": "1\n", "ci/unit.sh": script})
    gate.start_workers()
    gate.sluice("reconfigure")
    enqueue(gate, "c1")
    # while c1 is tested (merged already), someone pushes to main directly
    wait_until(started.exists, 60, "c1's build to start")
    gate.repos.git("app", "checkout", "-q", "main")
    gate.repos.commit("app", "main", {"HOTFIX": "x\n"})
    gate.repos.git("app", "checkout", "-q", "--detach")
    go.touch()
    gate.sluice("wait", "--idle", "--timeout", "120")

    (buildset,) = gate.buildsets()
    assert buildset["result"] == "FAILURE"
    assert "moved outside Sluice" in buildset["message"]
    assert "src/one.py" not in main_files(gate)
