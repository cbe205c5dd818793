"""System tasks: the ZooKeeper round trip used by ``sluice demo`` and health checks."""

from __future__ import annotations

from typing import Any

from scheduler.settings import load_settings
from scheduler.zk.client import process_client
from scheduler.zk.roundtrip import roundtrip as zk_roundtrip
from tasks.app import app


@app.task(name="sluice.system.roundtrip")
def roundtrip(token: str) -> dict[str, Any]:
    """Read and write ZooKeeper from a worker process and report what it saw."""
    settings = load_settings()
    return zk_roundtrip(process_client(settings.zookeeper), token)
