"""Real Celery workers: one ZooKeeper client per pool process, and Flower."""

from __future__ import annotations

import json
import pstats
import socket
import sys
import urllib.request
import uuid
from pathlib import Path

import pytest

from cli.stack import process
from tests.fixtures.waiting import wait_until
from tests.fixtures.workers import ServiceEnvironment, WorkerFactory


def test_prefork_children_each_talk_to_zookeeper(celery_workers: WorkerFactory) -> None:
    worker = celery_workers.start(["maintenance"], concurrency=2)
    app = celery_workers.app
    # Two tasks that hold their process for a moment must run in both children.
    results = [
        app.send_task("sluice.system.roundtrip", args=[uuid.uuid4().hex, 1.5]) for _ in range(2)
    ]
    replies = [r.get(timeout=30) for r in results]
    pids = {reply["read"]["pid"] for reply in replies}
    assert pids == set(worker.children()), (pids, worker.children())
    assert len(pids) == 2
    for reply in replies:
        assert reply["read"] == reply["written"]


def test_flower_sees_the_worker(
    celery_workers: WorkerFactory, test_environment: ServiceEnvironment
) -> None:
    worker = celery_workers.start(["maintenance"])
    port = process.free_port()
    env = test_environment.env()
    env["FLOWER_UNAUTHENTICATED_API"] = "true"
    log = test_environment.state_dir / "logs" / "flower.log"
    argv = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "tasks",
        "flower",
        f"--port={port}",
        "--address=127.0.0.1",
    ]
    flower = process.spawn(argv, log, env=env, cwd=test_environment.state_dir)
    try:

        def workers_seen() -> dict[str, object]:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{port}/api/workers?refresh=1", timeout=5
            ) as reply:
                data: dict[str, object] = json.load(reply)
                return data

        seen = wait_until(
            lambda: worker.node in workers_seen(), 60, f"Flower to list {worker.node}"
        )
        assert seen
    finally:
        process.stop_group(flower.pid)


def test_a_profiled_worker_writes_a_profile_per_pool_process(
    celery_workers: WorkerFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SLUICE_PROFILE_DIR (tasks/profiling.py): where a worker's CPU goes, for bench/."""
    monkeypatch.setenv("SLUICE_PROFILE_DIR", str(tmp_path / "prof"))
    worker = celery_workers.start(["maintenance"], concurrency=1)
    app = celery_workers.app
    app.send_task("sluice.system.roundtrip", args=[uuid.uuid4().hex]).get(timeout=30)
    (child,) = worker.children()
    written = tmp_path / "prof" / f"{socket.gethostname()}-{child}.prof"
    wait_until(written.exists, 30, "the pool process's profile")  # written at its first task
    functions = {name for _, _, name in pstats.Stats(str(written)).stats}  # type: ignore[attr-defined]
    assert "roundtrip" in functions
