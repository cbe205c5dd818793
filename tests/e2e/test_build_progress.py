"""A running build reports its phase through the task's PROGRESS state, with an estimate."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import redis

from scheduler.nudge import task_names
from tests.e2e.flower import get
from tests.e2e.system import CHECK_CONFIG, TENANT_YAML, SluiceSystem
from tests.fixtures.waiting import wait_until

APP = {
    ".zuul.yaml": """
        - job:
            name: slow
            run: ci/slow.sh
        - project:
            check:
              jobs: [slow]
        """,
    "ci/slow.sh": "#!/bin/sh\nsleep 2\n",
}


def _progress(broker: redis.Redis) -> list[dict[str, Any]]:
    found = []
    for key in broker.scan_iter("celery-task-meta-*"):
        raw = broker.get(key)
        meta = json.loads(raw) if raw else {}
        if meta.get("status") == "PROGRESS":
            found.append(meta["result"])
    return found


def test_progress_of_a_running_build(system: SluiceSystem, tmp_path: Path) -> None:
    """The estimate comes with the request from the scheduler: the executor here
    has no database it could ask (scheduler/reporting/estimates.py)."""
    system.tenant(TENANT_YAML)
    system.repos.commit("config", "main", CHECK_CONFIG)
    base = system.repos.commit("app", "main", APP)
    for ref in ("one", "two"):
        system.repos.commit("app", ref, {f"{ref}.txt": ref}, base=base)
    system.start_worker(("scheduler", "merger", "maintenance"))
    nowhere = tmp_path / "no-such-folder" / "sluice.db"
    nowhere.parent.mkdir()
    nowhere.parent.chmod(0o500)  # an executor opening it would fail (root: a file in its way)
    (nowhere.parent / "sluice.db").mkdir()
    system.start_worker(("executor",), env={"SLUICE_DATABASE_URL": f"sqlite:///{nowhere}"})
    system.sluice("reconfigure")
    broker = redis.Redis.from_url(system.environment.redis_url)

    system.enqueue("one")
    wait_until(lambda: bool(_progress(broker)), 60, "a build in PROGRESS", interval=0.1)
    first = _progress(broker)[0]
    assert first["job"] == "slow" and first["tenant"] == "demo"
    assert first["phase"] in ("started", "pre-run", "run", "post-run")
    assert "job=slow" in first["about"] and first["estimate"] is None  # no history yet
    system.sluice("wait", "--idle", "--timeout", "90")

    system.enqueue("two")

    def estimated() -> bool:
        return any(p["estimate"] for p in _progress(broker))

    wait_until(estimated, 60, "a build in PROGRESS with an estimate", interval=0.1)
    second = next(p for p in _progress(broker) if p["estimate"])
    assert 1.5 <= second["estimate"] <= 30 and second["elapsed"] >= 0
    broker.close()


def test_flower_shows_a_running_build_in_progress(system: SluiceSystem, flower: str) -> None:
    system.tenant(TENANT_YAML)
    system.repos.commit("config", "main", CHECK_CONFIG)
    slow = {**APP, "ci/slow.sh": "#!/bin/sh\nsleep 4\n"}
    base = system.repos.commit("app", "main", slow)
    system.repos.commit("app", "one", {"one.txt": "one"}, base=base)
    system.start_workers()
    system.sluice("reconfigure")
    system.enqueue("one")

    def in_progress() -> dict[str, Any] | None:
        tasks: dict[str, dict[str, Any]] = get(f"{flower}/api/tasks")
        for task in tasks.values():
            if task["name"] == task_names.BUILD and task["state"] == "PROGRESS":
                return task
        return None

    task = wait_until(in_progress, 60, "Flower showing a build in PROGRESS", interval=0.1)
    assert "job=slow" in task["args"]
    system.sluice("wait", "--idle", "--timeout", "90")
    wait_until(lambda: get(f"{flower}/api/task/info/{task['uuid']}")["state"] == "SUCCESS", 30)
