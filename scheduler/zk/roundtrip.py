"""The ZooKeeper round trip: proof that a process reaches the shared state.

Used by ``sluice demo`` through a Celery task and by health checks.
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import Any

from kazoo.exceptions import NodeExistsError

from scheduler.zk import paths
from scheduler.zk.client import ZooKeeperClient


def roundtrip(client: ZooKeeperClient, token: str) -> dict[str, Any]:
    """Write a node naming this process, read it back, and return both views."""
    path = paths.roundtrip(token)
    written = {
        "token": token,
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "time": time.time(),
    }
    data = json.dumps(written).encode()
    try:
        client.create(path, data, makepath=True)
    except NodeExistsError:
        client.set(path, data)
    raw, stat = client.get(path)
    return {"written": written, "read": json.loads(raw), "zxid": stat.mzxid, "path": path}
