"""A gate that tests changes in batches and bisects a failed one, on real workers."""

from __future__ import annotations

import signal

from cli.stack.process import is_alive
from scheduler.testhooks import HOLD_BEFORE_COMMIT
from tests.e2e.system import SluiceSystem
from tests.e2e.test_gate import APP as GATE_APP
from tests.e2e.test_gate import MAIN_YAML, gate_config
from tests.e2e.test_gate_more import _jobs_running, _merged_order
from tests.e2e.test_metrics import _scrape, _value, exporter  # noqa: F401
from tests.fixtures.waiting import wait_until

BATCHED = gate_config("batch: {size: 8, max-wait: 60}")
# a change fails its own test by adding a file named FAIL
APP = {**GATE_APP, "ci/unit.sh": "#!/bin/sh\ntest ! -e FAIL\n"}
REFS = [f"c{n}" for n in range(1, 9)]


def test_a_batch_of_eight_with_one_culprit_merges_seven_in_order(
    system: SluiceSystem,
    exporter: str,  # noqa: F811
) -> None:
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
    queue = {"tenant": "demo", "pipeline": "gate", "queue": "app"}
    samples = _scrape(exporter)
    # 8 -> 4 + 4, then the half with the culprit one by one (max-bisect-depth 1)
    assert _value(samples, "sluice_bisections_total", **queue) == 2
    tested = _value(samples, "sluice_batches_total", **queue)
    changes = _value(samples, "sluice_batch_changes_total", **queue)
    assert tested is not None and changes is not None and changes >= 8 and changes > tested


def test_a_bisection_goes_on_after_kill_9_of_the_scheduler(system: SluiceSystem) -> None:
    go, hold = system.root / "go", system.root / "hold"
    app = {
        **APP,
        "ci/unit.sh": f"#!/bin/sh\nwhile [ ! -e {go} ]; do sleep 0.1; done\ntest ! -e FAIL\n",
    }
    system.tenant(MAIN_YAML)
    system.repos.commit("config", "main", BATCHED)
    base = system.repos.commit("app", "main", app)
    for ref in REFS:
        files = {f"src/{ref}.py": "x\n", **({"FAIL": "x\n"} if ref in ("c2", "c7") else {})}
        system.repos.commit("app", ref, files, base=base)
    system.repos.git("app", "checkout", "-q", "--detach")
    fast_sweep = {"SLUICE_SWEEP_INTERVAL": "1"}
    system.start_worker(("merger", "maintenance"), env=fast_sweep, beat=True)
    system.start_worker(("executor",), concurrency=2)
    doomed = system.start_worker(("scheduler",), concurrency=1, env={HOLD_BEFORE_COMMIT: str(hold)})
    system.sluice("reconfigure")
    for ref in REFS:
        system.enqueue(ref, "gate")
    wait_until(lambda: _jobs_running(system) == 1, 60, "the batch of eight to build")
    # the batch fails: the pass that splits it holds before its commit, and dies there
    hold.touch()
    go.touch()
    wait_until(lambda: list(system.root.glob("hold.held-*")), 60, "the splitting pass to hold")
    doomed.kill(signal.SIGKILL)
    wait_until(lambda: not is_alive(doomed.pid), 10, "the scheduler worker to die")
    hold.unlink()
    system.start_worker(("scheduler",), concurrency=1)
    system.sluice("wait", "--idle", "--timeout", "180")

    results = {b["ref"]: b["result"] for b in system.buildsets()}
    assert results == {ref: "FAILURE" if ref in ("c2", "c7") else "SUCCESS" for ref in REFS}
    merged = _merged_order(system, base)
    assert merged == [r for r in REFS if r not in ("c2", "c7")]  # each once, in order


TWO_PROJECTS = """
- tenant:
    name: demo
    source:
      local:
        config-projects: [config]
        untrusted-projects:
          - app:
              include-branches: ['^main$']
          - lib:
              include-branches: ['^main$']
"""

SHARED_QUEUE = {
    "zuul.d/pipelines.yaml": gate_config()["zuul.d/pipelines.yaml"]
    + """
        - queue:
            name: integrated
            batch: {size: 4, max-wait: 60}
        """,
}


def _project(name: str) -> dict[str, str]:
    return {
        ".zuul.yaml": f"""
            - job:
                name: {name}-unit
                run: ci/unit.sh
            - project:
                queue: integrated
                gate:
                  jobs: [{name}-unit]
            """,
        "ci/unit.sh": "#!/bin/sh\ntest ! -e FAIL\n",
    }


def test_a_batch_across_two_projects_of_a_shared_queue(system: SluiceSystem) -> None:
    system.tenant(TWO_PROJECTS)
    system.repos.commit("config", "main", SHARED_QUEUE)
    bases = {name: system.repos.commit(name, "main", _project(name)) for name in ("app", "lib")}
    changes = [("app", "a1"), ("lib", "l1"), ("app", "a2"), ("lib", "l2")]
    for project, ref in changes:
        files = {f"src/{ref}.py": "x\n", **({"FAIL": "x\n"} if ref == "l2" else {})}
        system.repos.commit(project, ref, files, base=bases[project])
    for name in bases:
        system.repos.git(name, "checkout", "-q", "--detach")
    system.start_workers()
    system.sluice("reconfigure")
    for project, ref in changes:
        system.enqueue(ref, "gate", project=project)
    system.sluice("wait", "--idle", "--timeout", "180")

    results = {b["ref"]: b["result"] for b in system.buildsets()}
    assert results == {"a1": "SUCCESS", "l1": "SUCCESS", "a2": "SUCCESS", "l2": "FAILURE"}
    # a batch runs the jobs of both projects on one buildset (a1 rode with l1)
    jobs: dict[str, set[str]] = {}
    for build in system.builds():
        jobs.setdefault(build["buildset"], set()).add(build["job"])
    assert {"app-unit", "lib-unit"} in jobs.values()
    assert "a1" not in {b["ref"] for b in system.builds()}
    lib = system.repos.git("lib", "ls-tree", "-r", "--name-only", "main").split()
    app = system.repos.git("app", "ls-tree", "-r", "--name-only", "main").split()
    assert "src/l1.py" in lib and "src/l2.py" not in lib and "FAIL" not in lib
    assert {"src/a1.py", "src/a2.py"} <= set(app)


JUDGING = gate_config("pending-failure-depth: 2")


def test_a_flaky_failure_merges_under_pending_failure_depth(system: SluiceSystem) -> None:
    # a's own test fails; on top of it, b's (the same code and b's file) passes
    script = "#!/bin/sh\nif [ -e FLAKY ] && [ ! -e src/b.py ]; then exit 1; fi\n"
    system.tenant(MAIN_YAML)
    system.repos.commit("config", "main", JUDGING)
    base = system.repos.commit("app", "main", {**APP, "ci/unit.sh": script})
    system.repos.commit("app", "a", {"src/a.py": "x\n", "FLAKY": "x\n"}, base=base)
    system.repos.commit("app", "b", {"src/b.py": "x\n"}, base=base)
    system.repos.git("app", "checkout", "-q", "--detach")
    system.start_workers()
    system.sluice("reconfigure")
    for ref in ("a", "b"):
        system.enqueue(ref, "gate")
    system.sluice("wait", "--idle", "--timeout", "120")

    buildsets = {b["ref"]: b for b in system.buildsets()}
    assert {ref: b["result"] for ref, b in buildsets.items()} == {"a": "SUCCESS", "b": "SUCCESS"}
    assert "judged flaky" in buildsets["a"]["message"]
    assert _merged_order(system, base) == ["a", "b"]
    # b was never reset: one build each
    assert sorted(b["ref"] for b in system.builds()) == ["a", "b"]
