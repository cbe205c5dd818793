"""A real Flower process watching a test system's broker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cli.stack.process import free_port
from tests.e2e.system import SluiceSystem
from tests.fixtures.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def post(url: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


@pytest.fixture
def flower(system: SluiceSystem, tmp_path: Path) -> Iterator[str]:
    """A Flower process on the system's broker; its base URL."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    env.update(system.env())
    env["FLOWER_UNAUTHENTICATED_API"] = "true"
    log = (tmp_path / "flower.log").open("w")
    command = [sys.executable, "-m", "celery", "-A", "tasks", "flower"]
    proc = subprocess.Popen(
        [*command, f"--port={port}", "--address=127.0.0.1", "--purge_offline_workers=60"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:

        def up() -> bool:
            try:
                get(f"{base}/api/tasks")
            except OSError:
                return False
            return True

        wait_until(up, 60, "Flower answering", interval=0.2)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()
