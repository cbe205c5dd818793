"""The ZooKeeper round trip: proof that a process reaches the shared state.

Used by ``sluice demo`` through a Celery task and by health checks.
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import Any

from kazoo.client import KazooClient

from scheduler.zk import paths


def roundtrip(client: KazooClient, token: str, timeout: float = 10.0) -> dict[str, Any]:
    """Write a node naming this process, read it back, and return both views."""
    path = paths.roundtrip(token)
    written = {
        "token": token,
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "time": time.time(),
    }
    data = json.dumps(written).encode()
    client.ensure_path(path.rsplit("/", 1)[0])
    if client.exists_async(path).get(timeout=timeout):
        client.set_async(path, data).get(timeout=timeout)
    else:
        client.create_async(path, data).get(timeout=timeout)
    raw, stat = client.get_async(path).get(timeout=timeout)
    return {"written": written, "read": json.loads(raw), "zxid": stat.mzxid, "path": path}
