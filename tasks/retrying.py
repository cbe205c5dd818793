"""How Sluice tasks retry: one Celery policy, declared on the task.

A task retries only when ZooKeeper could not be used for a moment (no
connection, a lock lost with its session, a tenant lock not free in time):
its state is in ZooKeeper, so the retry continues where the attempt
stopped. Celery does the retrying (``autoretry_for`` with exponential
``retry_backoff``, capped and jittered), so a retry shows in Flower as the
same task in state RETRY, and an operator's manual retry of the same task
is just another delivery (every task is idempotent). Bad arguments are not
retried: they fail at once with a message naming the argument.

Loops inside the ZooKeeper layer retry through :mod:`scheduler.zk.retry`.
"""

from __future__ import annotations

from typing import Any

from scheduler.layouts.errors import LockTimeoutError
from scheduler.zk.errors import LockLostError, ZooKeeperUnavailableError

# What is worth another try of a whole task.
TRANSIENT: tuple[type[Exception], ...] = (
    ZooKeeperUnavailableError,
    LockLostError,
    LockTimeoutError,
)


def on_outage(*, max_retries: int, backoff: int, backoff_max: int = 60) -> dict[str, Any]:
    """Task options: retry :data:`TRANSIENT` errors ``max_retries`` times.

    The n-th retry waits up to ``backoff * 2**n`` seconds (at most
    ``backoff_max``), spread by Celery's full jitter.
    """
    return {
        "autoretry_for": TRANSIENT,
        "max_retries": max_retries,
        "retry_backoff": backoff,
        "retry_backoff_max": backoff_max,
        "retry_jitter": True,
    }


# Scheduler hops are short and cheap: retry often.
SCHEDULER = on_outage(max_retries=10, backoff=1, backoff_max=30)
# A merge or a build start: fewer, longer waits (the sweep re-nudges later anyway).
WORKER = on_outage(max_retries=5, backoff=2)
