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
from scheduler.zk.retry import PATIENT


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
        # A brief loss (an election, a restart): the outcome is durable, ask again.
        watch = _setter(arrived)
        there = PATIENT.within(max(0.0, deadline - time.monotonic()))(
            lambda: client.exists(path, watch=watch) is not None  # noqa: B023 (called at once)
        )
        if there:
            break
        if not arrived.wait(max(0.0, deadline - time.monotonic())):
            return None
    raw, _ = client.get(path)
    outcome = stored.decode(raw, path)
    outcome.pop(stored.SCHEMA_FIELD, None)
    with contextlib.suppress(NoNodeError):
        client.delete(path)
    return outcome
