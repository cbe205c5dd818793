"""Zuul's documented gate behaviours, end to end with real workers (issue 8's proofs).

Each change's job passes or fails by what the change carries: a ``FAIL`` file
fails it; a change whose unit script says so fails when another change's file
is in its tree (it only works without that change); a ``SLOW`` file makes it
wait for the test's go-flag.
"""

from __future__ import annotations

import pytest

from tests.e2e.system import SluiceSystem, dedent
from tests.e2e.test_gate import CONFIG, MAIN_YAML
from tests.e2e.test_gate_more import _merged_order
from tests.fixtures.waiting import wait_until

UNIT = """#!/bin/sh
test -e SLOW && while [ ! -e {go} ]; do sleep 0.1; done
test -e FAIL && exit 1
for other in $(cat NEEDS_ABSENT 2>/dev/null); do test -e "src/$other.py" && exit 1; done
exit 0
"""

PIPELINES = """
- pipeline:
    name: serial-gate
    manager: serial
    success:
      local:
        merge: true
- pipeline:
    name: latest
    manager: supercedent
    dequeue-on-new-patchset: false
"""


def setup(system: SluiceSystem, changes: dict[str, dict[str, str]], pipeline: str = "gate") -> str:
    go = system.root / "go"
    app = {
        ".zuul.yaml": f"""
            - job:
                name: unit
                run: ci/unit.sh
            - project:
                {pipeline}:
                  jobs: [unit]
            """,
        "ci/unit.sh": UNIT.format(go=go),
    }
    system.tenant(MAIN_YAML)
    config = {"zuul.d/pipelines.yaml": dedent(CONFIG["zuul.d/pipelines.yaml"]) + PIPELINES}
    system.repos.commit("config", "main", config)
    base = system.repos.commit("app", "main", app)
    for ref, files in changes.items():
        system.repos.commit("app", ref, {f"src/{ref}.py": "x\n", **files}, base=base)
    system.repos.git("app", "checkout", "-q", "--detach")
    system.start_worker(("scheduler", "merger", "maintenance"))
    system.start_worker(("executor",), concurrency=4)
    system.sluice("reconfigure")
    return base


def enqueue(system: SluiceSystem, ref: str, pipeline: str = "gate") -> str:
    return system.enqueue(ref, pipeline)


def run(system: SluiceSystem, refs: list[str], pipeline: str = "gate") -> dict[str, str]:
    for ref in refs:
        enqueue(system, ref, pipeline)
    (system.root / "go").touch()
    system.sluice("wait", "--idle", "--timeout", "150")
    return {b["ref"]: b["result"] for b in system.buildsets()}


@pytest.mark.parametrize(
    ("changes", "results", "merged"),
    [
        pytest.param(
            {"c1": {"FAIL": "x"}, "c2": {}, "c3": {}},
            {"c1": "FAILURE", "c2": "SUCCESS", "c3": "SUCCESS"},
            ["c2", "c3"],
            id="the-first-fails",
        ),
        pytest.param(
            {"c1": {"FAIL": "x"}, "c2": {}, "c3": {"FAIL": "x"}, "c4": {}},
            {"c1": "FAILURE", "c2": "SUCCESS", "c3": "FAILURE", "c4": "SUCCESS"},
            ["c2", "c4"],
            id="two-failures",
        ),
        pytest.param(
            # c2 only works without c1; c1 fails (slowly), so c2 is retested without it
            {"c1": {"FAIL": "x", "SLOW": "x"}, "c2": {"NEEDS_ABSENT": "c1\n"}},
            {"c1": "FAILURE", "c2": "SUCCESS"},
            ["c2"],
            id="retested-when-the-item-ahead-fails-too",
        ),
    ],
)
def test_gate(
    system: SluiceSystem,
    changes: dict[str, dict[str, str]],
    results: dict[str, str],
    merged: list[str],
) -> None:
    base = setup(system, changes)
    assert run(system, list(changes)) == results
    assert _merged_order(system, base) == merged


def test_a_change_ahead_dequeued_by_hand(system: SluiceSystem) -> None:
    base = setup(system, {"c1": {"SLOW": "x"}, "c2": {}})
    enqueue(system, "c1")
    enqueue(system, "c2")
    system.sluice(
        "dequeue", "--tenant", "demo", "--pipeline", "gate", "--project", "app", "--ref", "c1"
    )
    (system.root / "go").touch()
    system.sluice("wait", "--idle", "--timeout", "150")
    assert {b["ref"]: b["result"] for b in system.buildsets()} == {
        "c1": "DEQUEUED",
        "c2": "SUCCESS",
    }
    assert _merged_order(system, base) == ["c2"]


def test_serial_runs_one_change_at_a_time(system: SluiceSystem) -> None:
    base = setup(system, {"c1": {}, "c2": {}}, pipeline="serial-gate")
    assert run(system, ["c1", "c2"], "serial-gate") == {"c1": "SUCCESS", "c2": "SUCCESS"}
    assert _merged_order(system, base) == ["c1", "c2"]
    # by change, not by start time: both builds may start within one second,
    # the times' resolution, and a tie would put either first
    builds = {b["ref"]: b for b in system.builds()}
    assert builds["c1"]["end_time"] <= builds["c2"]["start_time"], "serial builds overlapped"


def test_supercedent_runs_only_the_newest_item_of_a_ref(system: SluiceSystem) -> None:
    setup(system, {"c1": {"SLOW": "x"}}, pipeline="latest")
    enqueue(system, "c1", "latest")
    wait_until(lambda: "running" in system.sluice("status"), 60, "the first build to run")
    commits = []
    for n in range(3):  # three newer commits while the first runs
        system.repos.git("app", "checkout", "-q", "c1")
        commits.append(system.repos.commit("app", "c1", {f"n{n}": "x"}))
        system.repos.git("app", "checkout", "-q", "--detach")
        enqueue(system, "c1", "latest")
    (system.root / "go").touch()
    system.sluice("wait", "--idle", "--timeout", "150")
    results = sorted((b["result"], b.get("newrev")) for b in system.buildsets())
    tested = [rev for result, rev in results if result == "SUCCESS"]
    # the running one finishes; of the three waiting, only the newest runs
    assert len(tested) == 2, results
    assert commits[-1] in tested, results
    assert len(system.builds()) == 2, "a superseded item ran a build"
