"""Celery worker processes: the command line and the readiness probe."""

from __future__ import annotations

import socket
import sys
from collections.abc import Sequence

from celery import Celery

# The task queues (docs/celery.md), one worker process tree each
# in the local stack.
STACK_QUEUES = ("scheduler", "merger", "executor", "maintenance")

# Processes of the local stack's executor worker: a build mostly waits (on
# its job's processes, its nodes, the sandbox's set-up and tear-down), so an
# executor runs more builds at once than the host has cores, as Zuul's
# executors do. The other workers run the stack's --concurrency.
EXECUTOR_CONCURRENCY = 4


def node_name(prefix: str) -> str:
    return f"{prefix}@{socket.gethostname()}"


def worker_command(
    queues: Sequence[str],
    node: str,
    *,
    concurrency: int = 1,
    pool: str = "prefork",
    loglevel: str = "INFO",
    extra: Sequence[str] = (),
) -> list[str]:
    """The ``celery worker`` command line for ``queues`` under node name ``node``."""
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "tasks",
        "worker",
        "-Q",
        ",".join(queues),
        "-n",
        node,
        "--concurrency",
        str(concurrency),
        "--pool",
        pool,
        "--loglevel",
        loglevel,
        "--without-gossip",
        "--without-mingle",
        *extra,
    ]


def ping(app: Celery, nodes: Sequence[str], timeout: float = 1.0) -> set[str]:
    """The subset of ``nodes`` that answer a Celery ping."""
    try:
        replies = app.control.ping(destination=list(nodes), timeout=timeout)
    except Exception:  # broker unreachable: nobody answered
        return set()
    answered: set[str] = set()
    for reply in replies or []:
        answered.update(reply)
    return answered & set(nodes)
