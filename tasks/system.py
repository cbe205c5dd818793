"""System tasks: the ZooKeeper round trip used by ``sluice demo`` and health checks."""

from __future__ import annotations

import time
from typing import Any

from scheduler.nudge import task_names
from scheduler.zk.client import process_client
from scheduler.zk.roundtrip import roundtrip as zk_roundtrip
from tasks.app import app
from tasks.runtime import runtime_settings

# At most this long may a round trip hold its worker process (tests use it
# to make two pool processes busy at once).
MAX_HOLD_SECONDS = 5.0


@app.task(name=task_names.ROUNDTRIP)
def roundtrip(token: str, hold: float = 0.0) -> dict[str, Any]:
    """Read and write ZooKeeper from a worker process and report what it saw."""
    settings = runtime_settings()
    result = zk_roundtrip(process_client(settings.zookeeper), token)
    if hold > 0:
        time.sleep(min(hold, MAX_HOLD_SECONDS))
    return result
