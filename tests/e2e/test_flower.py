"""What an operator sees in Flower: every task says what it is about, in words.

A real Flower process watches the test's broker while a change goes
through check; its HTTP API must show each build as tenant, pipeline,
project, change, job and attempt, each merge as its kind and change, and
each result in the same words. Headless Chromium takes a screenshot of a
build's task page, kept under ``artifacts/`` for a person to look at.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from scheduler.nudge import task_names
from tests.e2e.flower import get
from tests.e2e.system import SluiceSystem
from tests.e2e.test_check_pipeline import prepare_check
from tests.fixtures.services import missing_service
from tests.fixtures.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def _screenshot(url: str, target: Path, tmp_path: Path) -> None:
    if not Path(CHROMIUM).exists():
        missing_service("chromium (make bootstrap installs it)")
    target.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'chromium'}",
            "--window-size=1400,1000",
            f"--screenshot={target}",
            url,
        ],
        check=True,
        capture_output=True,
        timeout=90,
    )


def test_flower_shows_what_each_task_is_about(
    system: SluiceSystem, flower: str, tmp_path: Path
) -> None:
    prepare_check(system)
    system.start_workers()
    system.sluice("reconfigure")
    system.enqueue("feature")
    system.sluice("wait", "--idle", "--timeout", "90")

    def tasks() -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = get(f"{flower}/api/tasks")
        return found

    def builds_done() -> bool:
        done = [
            t for t in tasks().values() if t["name"] == task_names.BUILD and t["state"] == "SUCCESS"
        ]
        return len(done) == 3

    wait_until(builds_done, 60, "Flower saw the three builds succeed", interval=0.3)
    everything = tasks()
    builds = [t for t in everything.values() if t["name"] == task_names.BUILD]
    jobs = set()
    for build in builds:
        args = build["args"]
        for words in ("tenant=demo", "pipeline=check", "project=app", "attempt=1"):
            assert words in args, args
        assert "change=refs/heads/feature" in args or "change=feature" in args, args
        jobs.add(args.split("job=")[1].split()[0])
        assert "completed" in build["result"] and args.split(" request=")[0] in build["result"]
    assert jobs == {"lint", "unit", "experimental"}
    merges = [t for t in everything.values() if t["name"] == task_names.MERGE]
    assert merges and all("merge=merge" in t["args"] for t in merges if "project=" in t["args"])
    pipeline = [t for t in everything.values() if t["name"] == task_names.PROCESS_PIPELINE]
    assert pipeline and all("tenant=demo pipeline=check" in t["args"] for t in pipeline)

    lint = next(t for t in builds if "job=lint" in t["args"])
    target = ARTIFACTS / "flower-build-task.png"
    _screenshot(f"{flower}/task/{lint['uuid']}", target, tmp_path)
    assert target.stat().st_size > 10_000
    print(f"screenshot of Flower's build task page: {target}")
