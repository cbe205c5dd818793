"""kill -9 of a scheduler worker in the middle of processing a pipeline.

The crash Zuul's own test suite skips as unstable. Worker A is held by a
test hook after it consumed the pipeline's events and decided, before it
commits anything; it is killed there with SIGKILL while worker B runs. B
resumes from ZooKeeper once A's session expired (its lock vanished) and the
sweep re-sent the nudge: every change is enqueued exactly once, every job
runs exactly once, nothing is lost.
"""

from __future__ import annotations

import signal
from pathlib import Path

from cli.stack.process import is_alive
from scheduler.testhooks import HOLD_BEFORE_COMMIT
from tests.e2e.system import SluiceSystem
from tests.e2e.test_check_behaviours import APP, CONFIG, MAIN_YAML
from tests.fixtures.waiting import wait_until

REFS = ["feature-1", "feature-2", "feature-3"]


def test_a_killed_scheduler_worker_is_resumed_by_another(system: SluiceSystem) -> None:
    system.environment.session_timeout = 4.0
    system.tenant(MAIN_YAML)
    system.repos.commit("config", "main", CONFIG)
    base = system.repos.commit("app", "main", APP)
    for n, ref in enumerate(REFS):
        system.repos.commit("app", ref, {f"src/f{n}.py": "x = 1\n"}, base=base)
    hold = system.root / "hold"
    system.start_worker(
        ("merger", "executor", "maintenance"), env={"SLUICE_SWEEP_INTERVAL": "1"}, beat=True
    )
    doomed = system.start_worker(("scheduler",), concurrency=1, env={HOLD_BEFORE_COMMIT: str(hold)})
    system.sluice("reconfigure")

    hold.touch()
    enqueues = [
        system.sluice_process(
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
            "--timeout",
            "120",
        )
        for ref in REFS
    ]
    held = wait_until(
        lambda: list(system.root.glob("hold.held-*")),
        60,
        "worker A to hold in the middle of a pipeline pass",
    )
    held_pid = int(Path(held[0]).read_text())
    assert held_pid in doomed.children()

    system.start_worker(("scheduler",), concurrency=1)
    doomed.kill(signal.SIGKILL)
    wait_until(
        lambda: not is_alive(held_pid) and not is_alive(doomed.pid),
        10,
        "worker A to be dead (/proc)",
    )

    items = []
    for process in enqueues:
        out, err = process.communicate(timeout=150)
        assert process.returncode == 0, err
        items.append(out.strip())
    assert len(set(items)) == len(REFS)
    system.sluice("wait", "--idle", "--timeout", "120")

    sets = system.buildsets()
    assert sorted(b["ref"] for b in sets) == REFS  # each change enqueued exactly once
    assert {b["result"] for b in sets} == {"SUCCESS"}
    builds = sorted((b["ref"], b["job"], b["attempt"]) for b in system.builds())
    assert builds == sorted((ref, job, 1) for ref in REFS for job in ("lint", "unit"))
