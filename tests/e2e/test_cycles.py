"""Dependency cycles on real workers: tested, reported and merged as one unit.

The git driver has no ``Depends-On`` of its own, so these tests enqueue a
change with its dependencies as a forge driver finds them (the cycle's
changes marked) through the tenant's management queue; the sweep (every
second) nudges it. The last test drives cycles through the fake GitHub's
``Depends-On`` lines and merge API.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cli.stack.process import is_alive
from scheduler.model.change import Change
from scheduler.testhooks import HOLD_BEFORE_COMMIT
from scheduler.wire.events import Enqueue
from scheduler.zk import paths
from scheduler.zk.client import ZooKeeperClient, connect
from scheduler.zk.event_queue import EventQueue
from tests.e2e.system import SluiceSystem
from tests.e2e.test_batches import TWO_PROJECTS, _project
from tests.e2e.test_gate import gate_config
from tests.e2e.test_gate_more import _jobs_running
from tests.fixtures.fake_github import FakeGitHub, Pull
from tests.fixtures.waiting import wait_until
from tests.fixtures.workers import WorkerProcess
from tests.web.test_github_gate_order import gate_comments, ready
from tests.web.test_github_journey import CONFIG, forge_system

PROJECTS = TWO_PROJECTS + "          - solo:\n              include-branches: ['^main$']\n"

CYCLES = {
    "zuul.d/pipelines.yaml": gate_config()["zuul.d/pipelines.yaml"]
    + """
        - queue:
            name: integrated
            allow-circular-dependencies: true
        """,
}
# solo has a queue of its own that does not allow cycles
SOLO = {
    ".zuul.yaml": """
        - job:
            name: solo-unit
            run: ci/unit.sh
        - project:
            gate:
              jobs: [solo-unit]
        """,
    "ci/unit.sh": "#!/bin/sh\ntest ! -e FAIL\n",
}
FAST_SWEEP = {"SLUICE_SWEEP_INTERVAL": "1"}


@pytest.fixture
def cycles(system: SluiceSystem) -> Iterator[SluiceSystem]:
    system.tenant(PROJECTS)
    system.repos.commit("config", "main", CYCLES)
    for name in ("app", "lib"):
        system.repos.commit(name, "main", _project(name))
    system.repos.commit("solo", "main", SOLO)
    yield system


def zk(system: SluiceSystem) -> ZooKeeperClient:
    return connect(system.environment.zookeeper.settings())


def propose(system: SluiceSystem, project: str, ref: str, files: dict[str, str]) -> Change:
    base = system.repos.git(project, "rev-parse", "main")
    sha = system.repos.commit(project, ref, files, base=base)
    system.repos.git(project, "checkout", "-q", "--detach")  # the merge queue pushes to main
    return Change("local", project, "main", ref, sha)


def enqueue_cycle(system: SluiceSystem, *changes: Change) -> None:
    """The last change enqueued, needing the others and itself (as a forge's driver says)."""
    last = changes[-1]
    members = tuple(
        Change(c.connection, c.project, c.branch, c.ref, c.commit, cycle=True) for c in changes
    )
    event = Enqueue(
        Change(**{**last.__dict__, "needs": (members[-1], *members[:-1])}), pipeline="gate"
    )
    client = zk(system)
    try:
        EventQueue(client, paths.tenant_management_queue("demo")).put(event.to_dict())
    finally:
        client.stop()


def gate_results(system: SluiceSystem) -> dict[str, tuple[str, str]]:
    return {b["ref"]: (b["result"], b["message"]) for b in system.buildsets()}


def files_of(system: SluiceSystem, project: str) -> set[str]:
    return set(system.repos.git(project, "ls-tree", "-r", "--name-only", "main").split())


def test_a_two_cycle_and_a_three_cycle_across_projects_merge_together(
    cycles: SluiceSystem,
) -> None:
    a1 = propose(cycles, "app", "a1", {"src/a1.py": "x\n"})
    l1 = propose(cycles, "lib", "l1", {"src/l1.py": "x\n"})
    a2 = propose(cycles, "app", "a2", {"src/a2.py": "x\n"})
    l2 = propose(cycles, "lib", "l2", {"src/l2.py": "x\n"})
    a3 = propose(cycles, "app", "a3", {"src/a3.py": "x\n"})
    cycles.start_worker(env=FAST_SWEEP, beat=True)
    cycles.sluice("reconfigure")
    enqueue_cycle(cycles, l1, a1)
    enqueue_cycle(cycles, a2, l2, a3)
    wait_until(lambda: len(cycles.buildsets()) == 5, 180, "five changes reported", 1.0)
    cycles.sluice("wait", "--idle", "--timeout", "120")

    results = gate_results(cycles)
    assert {ref: r for ref, (r, _) in results.items()} == dict.fromkeys(
        ["a1", "l1", "a2", "l2", "a3"], "SUCCESS"
    )
    assert "dependency cycle (lib l1, app a1)" in results["l1"][1]
    assert {"src/a1.py", "src/a2.py", "src/a3.py"} <= files_of(cycles, "app")
    assert {"src/l1.py", "src/l2.py"} <= files_of(cycles, "lib")
    # each cycle was tested once, its last change building the jobs of both projects
    jobs: dict[str, set[str]] = {}
    for build in cycles.builds():
        jobs.setdefault(build["ref"], set()).add(build["job"])
    assert jobs == {"a1": {"app-unit", "lib-unit"}, "a3": {"app-unit", "lib-unit"}}


def test_one_failure_dequeues_its_cycle_and_a_refused_cycle_says_why(cycles: SluiceSystem) -> None:
    a1 = propose(cycles, "app", "a1", {"src/a1.py": "x\n"})
    l1 = propose(cycles, "lib", "l1", {"src/l1.py": "x\n", "FAIL": "x\n"})
    s1 = propose(cycles, "solo", "s1", {"src/s1.py": "x\n"})
    s2 = propose(cycles, "solo", "s2", {"src/s2.py": "x\n"})
    cycles.start_worker(env=FAST_SWEEP, beat=True)
    cycles.sluice("reconfigure")
    enqueue_cycle(cycles, a1, l1)
    enqueue_cycle(cycles, s1, s2)
    wait_until(lambda: len(cycles.buildsets()) == 3, 180, "three changes reported", 1.0)
    cycles.sluice("wait", "--idle", "--timeout", "120")

    results = gate_results(cycles)
    assert results["l1"][0] == "FAILURE" and results["a1"][0] == "FAILURE"
    for ref in ("a1", "l1"):
        assert "dependency cycle (app a1, lib l1) failed" in results[ref][1]
    assert "src/a1.py" not in files_of(cycles, "app")
    assert "src/l1.py" not in files_of(cycles, "lib")
    assert results["s2"] == (
        "ERROR",
        "Dependency cycle detected and project solo doesn't allow circular dependencies",
    )
    assert "src/s2.py" not in files_of(cycles, "solo")


def kill_9_setup(cycles: SluiceSystem) -> tuple[Path, Path, WorkerProcess]:
    """Builds that wait for ``go``; a scheduler worker that holds before a commit
    while ``hold`` exists; the 2-cycle ``l1``, ``a1`` building."""
    go, hold = cycles.root / "go", cycles.root / "hold"
    wait = f"#!/bin/sh\nwhile [ ! -e {go} ]; do sleep 0.1; done\n"
    for name in ("app", "lib"):
        cycles.repos.commit(name, "main", {"ci/unit.sh": wait})
    a1 = propose(cycles, "app", "a1", {"src/a1.py": "x\n"})
    l1 = propose(cycles, "lib", "l1", {"src/l1.py": "x\n"})
    cycles.start_worker(("merger", "maintenance"), env=FAST_SWEEP, beat=True)
    cycles.start_worker(("executor",), concurrency=2)
    doomed = cycles.start_worker(("scheduler",), concurrency=1, env={HOLD_BEFORE_COMMIT: str(hold)})
    cycles.sluice("reconfigure")
    enqueue_cycle(cycles, l1, a1)
    wait_until(lambda: _jobs_running(cycles) == 2, 90, "the cycle's two jobs to run")
    return go, hold, doomed


def kill_held(cycles: SluiceSystem, hold: Path, doomed: WorkerProcess) -> None:
    """The held pass dies before its commit; another scheduler worker goes on."""
    wait_until(lambda: list(cycles.root.glob("hold.held-*")), 60, "a pass to hold")
    doomed.kill(signal.SIGKILL)
    wait_until(lambda: not is_alive(doomed.pid), 10, "the scheduler worker to die")
    hold.unlink()
    cycles.start_worker(("scheduler",), concurrency=1)
    wait_until(lambda: len(cycles.buildsets()) >= 2, 180, "both changes reported", 1.0)
    cycles.sluice("wait", "--idle", "--timeout", "120")


def merged_once(cycles: SluiceSystem) -> None:
    """Both changes reported once, SUCCESS, each on its branch once; each job built once."""
    reported = sorted((b["ref"], b["result"]) for b in cycles.buildsets())
    assert reported == [("a1", "SUCCESS"), ("l1", "SUCCESS")]
    for project, ref in (("app", "a1"), ("lib", "l1")):
        added = cycles.repos.git(project, "log", "--format=%H", "main", "--", f"src/{ref}.py")
        assert len(added.split()) == 1
    assert sorted(b["job"] for b in cycles.builds()) == ["app-unit", "lib-unit"]


def test_a_cycle_in_the_gate_survives_kill_9_of_the_scheduler(cycles: SluiceSystem) -> None:
    go, hold, doomed = kill_9_setup(cycles)
    # the pass that decides the cycle passed (and asks for its first push) dies before its commit
    hold.touch()
    go.touch()
    kill_held(cycles, hold, doomed)
    merged_once(cycles)


def test_a_cycle_half_pushed_survives_kill_9_of_the_scheduler(cycles: SluiceSystem) -> None:
    gate = cycles.root / "gate"
    hook = cycles.root / "repos" / "app" / ".git" / "hooks" / "pre-receive"
    hook.write_text(f"#!/bin/sh\nwhile [ -e {gate} ]; do sleep 0.1; done\n")
    hook.chmod(0o755)
    gate.touch()  # app refuses to take a push until the file is gone
    go, hold, doomed = kill_9_setup(cycles)
    go.touch()
    lib = cycles.repos.git("lib", "rev-parse", "main")
    wait_until(lambda: cycles.repos.git("lib", "rev-parse", "main") != lib, 90, "l1 pushed")
    # a1's push waits in app's hook: the pass after it (or the one asking for it) dies
    hold.touch()
    gate.unlink()
    kill_held(cycles, hold, doomed)
    merged_once(cycles)


# -- through a forge: the fake GitHub's Depends-On lines and merge API -----------------

FORGE_CYCLES = dict(CONFIG)
FORGE_CYCLES["zuul.d/pipelines.yaml"] = (
    CONFIG["zuul.d/pipelines.yaml"].replace("                status: ['demo/check:success']\n", "")
    + """
        - queue:
            name: cyc
            allow-circular-dependencies: true
        - project:
            name: org/app
            queue: cyc
        """
)
URL = "Depends-On: https://github.com/org/app/pull/{}"


def open_cycle(system: SluiceSystem, forge: FakeGitHub, first: int, size: int) -> list[Pull]:
    """Pull requests ``first``..: each depends on the next, the last on the first."""
    base = system.repos.git("org/app", "rev-parse", "main")
    pulls = []
    for n in range(first, first + size):
        system.repos.commit("org/app", f"p{n}", {f"src/p{n}.py": f"{n}\n"}, base=base)
        system.repos.git("org/app", "checkout", "-q", "--detach")
        after = first if n == first + size - 1 else n + 1
        pulls.append(forge.open_pull("org/app", f"p{n}", f"Change {n}", body=URL.format(after)))
    return pulls


def merged(forge: FakeGitHub) -> list[int]:
    return [m["number"] for m in forge.merges]


def gate_cycle(system: SluiceSystem, forge: FakeGitHub, pulls: list[Pull], merges: int) -> None:
    """Every pull request of a cycle ready for the gate; wait for ``merges`` merges in all."""
    for pull in pulls:
        ready(forge, pull)
    wait_until(lambda: len(forge.merges) == merges, 120, f"{merges} merges", 0.5)
    system.sluice("wait", "--idle", "--timeout", "90")


@pytest.mark.timeout(400)
def test_github_cycles_merge_together_and_a_merge_refused_half_way_is_reported_on_all(
    system: SluiceSystem,
) -> None:
    with forge_system(system, FORGE_CYCLES) as (forge, _web):
        # a 2-cycle: both merged by GitHub, one after the other
        two = open_cycle(system, forge, 1, 2)
        system.sluice("wait", "--idle", "--timeout", "90")
        # the check pipeline tested the cycle once (pull 2 opened last) and reported both
        checks = [
            b
            for b in system.buildsets()
            if b["pipeline"] == "check" and "dependency cycle" in (b["message"] or "")
        ]
        assert {b["ref"]: b["result"] for b in checks} == {
            "refs/pull/1/head": "SUCCESS",
            "refs/pull/2/head": "SUCCESS",
        }
        gate_cycle(system, forge, two, 2)
        assert sorted(merged(forge)) == [1, 2]
        for pull in two:
            (said,) = gate_comments(forge, pull)
            assert "tested with its dependency cycle (org/app refs/pull/" in said
            assert "refs/pull/1/head" in said and "refs/pull/2/head" in said

        # a 3-cycle
        three = open_cycle(system, forge, 3, 3)
        system.sluice("wait", "--idle", "--timeout", "90")
        gate_cycle(system, forge, three, 5)
        assert sorted(merged(forge)[2:]) == [3, 4, 5]

        # GitHub refuses the second merge of a 2-cycle: both say so, the second is not merged
        refused = open_cycle(system, forge, 6, 2)
        system.sluice("wait", "--idle", "--timeout", "90")
        merge = forge.merge

        def refuse_second(project: str, number: int, sha: str, method: str) -> tuple[int, Any]:
            if len(forge.merges) > 5:
                return 405, {"message": "Pull Request is not mergeable"}
            return merge(project, number, sha, method)

        forge.merge = refuse_second  # type: ignore[method-assign]
        for pull in refused:
            ready(forge, pull)

        def both_told() -> bool:
            return all(forge.statuses_of(p)[-1:] == ["failure"] for p in refused)

        wait_until(both_told, 120, "both told the cycle failed to merge", 0.5)
        system.sluice("wait", "--idle", "--timeout", "90")
        assert len(forge.merges) == 6  # the first one only
        for pull in refused:
            said = gate_comments(forge, pull)[-1]
            assert "failed to merge" in said and "Pull Request is not mergeable" in said
            assert "; merged: org/app refs/pull/" in said  # the first, before the refusal
