"""Promote in a gate, and a semaphore of one across two changes, on real parts."""

from __future__ import annotations

import json
from datetime import datetime

from tests.e2e.system import SluiceSystem
from tests.e2e.test_gate import CONFIG, MAIN_YAML
from tests.fixtures.waiting import wait_until


def _merged_order(system: SluiceSystem, base: str) -> list[str]:
    """The change files each first-parent commit of main added, oldest first."""
    shas = system.repos.git("app", "rev-list", "--first-parent", "--reverse", f"{base}..main")
    order = []
    for sha in shas.split():
        files = system.repos.git("app", "diff", "--name-only", f"{sha}^1", sha).split()
        order += [f.removeprefix("src/").removesuffix(".py") for f in files if f.startswith("src/")]
    return order


def _jobs_running(system: SluiceSystem) -> int:
    status = json.loads(system.sluice("status", "--json"))
    return sum(
        job["state"] == "running"
        for tenant in status["tenants"]
        for pipeline in tenant["pipelines"]
        for queue in pipeline["queues"]
        for item in queue["items"]
        for job in item["jobs"]
    )


def test_promote_moves_a_change_to_the_head(system: SluiceSystem) -> None:
    go = system.root / "go"
    app = {
        ".zuul.yaml": """
            - job:
                name: unit
                run: ci/unit.sh
            - project:
                gate:
                  jobs: [unit]
            """,
        "ci/unit.sh": f"#!/bin/sh\nwhile [ ! -e {go} ]; do sleep 0.1; done\n",
    }
    system.tenant(MAIN_YAML)
    system.repos.commit("config", "main", CONFIG)
    base = system.repos.commit("app", "main", app)
    for ref in ("c1", "c2", "c3"):
        system.repos.commit("app", ref, {f"src/{ref}.py": "x\n"}, base=base)
    system.repos.git("app", "checkout", "-q", "--detach")
    # builds that wait must not take the slots the scheduler needs
    system.start_worker(("scheduler", "merger", "maintenance"))
    system.start_worker(("executor",), concurrency=3)
    system.sluice("reconfigure")
    for ref in ("c1", "c2", "c3"):
        system.sluice(
            "enqueue",
            "--tenant",
            "demo",
            "--pipeline",
            "gate",
            "--project",
            "app",
            "--branch",
            "main",
            "--ref",
            ref,
        )
    wait_until(lambda: _jobs_running(system) == 3, 60, "the three gate builds to run")

    out = system.sluice(
        "promote", "--tenant", "demo", "--pipeline", "gate", "--project", "app", "--ref", "c3"
    )
    assert len(out.split()) == 1
    go.touch()
    system.sluice("wait", "--idle", "--timeout", "120")

    assert _merged_order(system, base) == ["c3", "c1", "c2"]
    assert {b["result"] for b in system.buildsets()} == {"SUCCESS"}
    # c1 and c2 were restarted behind c3: their first builds were aborted
    assert [b["ref"] for b in system.builds() if b["result"] == "SUCCESS"].count("c1") == 1


SEMAPHORE_CONFIG = {
    "zuul.d/pipelines.yaml": """
        - pipeline:
            name: check
            manager: independent
        - semaphore:
            name: production
            max: 1
        - job:
            name: base
            parent: null
            timeout: 120
        """,
}


def test_a_semaphore_of_one_serialises_two_changes(system: SluiceSystem) -> None:
    app = {
        ".zuul.yaml": """
            - job:
                name: deploy
                run: ci/deploy.sh
                semaphores: [production]
            - project:
                check:
                  jobs: [deploy]
            """,
        "ci/deploy.sh": "#!/bin/sh\nsleep 2\n",
    }
    system.tenant(MAIN_YAML)
    system.repos.commit("config", "main", SEMAPHORE_CONFIG)
    base = system.repos.commit("app", "main", app)
    for ref in ("c1", "c2"):
        system.repos.commit("app", ref, {f"src/{ref}.py": "x\n"}, base=base)
    system.start_workers(2)
    system.sluice("reconfigure")
    for ref in ("c1", "c2"):
        system.sluice(
            "enqueue",
            "--tenant",
            "demo",
            "--pipeline",
            "check",
            "--project",
            "app",
            "--branch",
            "main",
            "--ref",
            ref,
        )

    def waiting() -> bool:
        return "waiting_for_semaphore" in system.sluice("status", "--json")

    wait_until(waiting, 60, "one deploy to wait for the semaphore in `sluice status`")
    system.sluice("wait", "--idle", "--timeout", "120")

    builds = sorted(system.builds(), key=lambda b: b["start_time"])
    assert [b["result"] for b in builds] == ["SUCCESS", "SUCCESS"]
    first_end = datetime.fromisoformat(builds[0]["end_time"])
    second_start = datetime.fromisoformat(builds[1]["start_time"])
    assert first_end <= second_start, "the two deploys overlapped"
