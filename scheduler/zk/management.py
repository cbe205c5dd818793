"""Management results: the outcome of an enqueue or dequeue, for the one who asked.

The pipeline pass that applies a management event writes its outcome to
``/results/management/<result id>`` in the same transaction as the applied
event (:mod:`scheduler.processing.pipeline`); the asker waits for that node
with a watch, reads it and deletes it. On SUSPENDED or LOST the wait raises
(its deadline); the outcome stays in ZooKeeper and a retry of the wait
still finds it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

from kazoo.exceptions import NoNodeError

from scheduler.zk import paths, stored
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.errors import ZooKeeperUnavailableError


def _setter(event: threading.Event) -> Any:
    return lambda _watched: event.set()


def wait_for_result(
    client: ZooKeeperClient, result_id: str, timeout: float
) -> dict[str, Any] | None:
    """The outcome written for ``result_id`` (then removed), or None after ``timeout``."""
    path = paths.management_result(result_id)
    deadline = time.monotonic() + timeout
    while True:
        arrived = threading.Event()
        try:
            if client.exists(path, watch=_setter(arrived)) is not None:
                break
        except ZooKeeperUnavailableError:
            # A brief loss (an election, a restart): the outcome is durable, ask again.
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)
            continue
        if not arrived.wait(max(0.0, deadline - time.monotonic())):
            return None
    raw, _ = client.get(path)
    outcome = stored.decode(raw, path)
    outcome.pop(stored.SCHEMA_FIELD, None)
    with contextlib.suppress(NoNodeError):
        client.delete(path)
    return outcome
