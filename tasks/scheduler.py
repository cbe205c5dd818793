"""Scheduler tasks: the event hops and pipeline processing (``scheduler`` queue).

Each takes names only and is idempotent: a duplicate delivery finds the
events moved, or the pipeline lock taken (it raises the dirty flag and
returns), or nothing to do. ``acks_late`` with ``task_reject_on_worker_lost``
(celeryconfig): a worker killed mid-task gets its message redelivered, and
the redelivery resumes from ZooKeeper.
"""

from __future__ import annotations

from typing import Any

from celery import Task

from scheduler import tasknames
from scheduler.errors import SluiceError
from scheduler.processing import forwarding
from scheduler.processing.pipeline import process_pipeline as run_pipeline
from scheduler.zk.errors import LockLostError, ZooKeeperUnavailableError
from tasks.app import app
from tasks.runtime import runtime

MAX_RETRIES = 10
RETRY_DELAY = 1.0
# A lost lock or an unreachable ZooKeeper is worth another try; the state is
# in ZooKeeper, so the retry continues where this attempt stopped.
RETRYABLE = (ZooKeeperUnavailableError, LockLostError)


class SchedulerTaskError(SluiceError):
    """A scheduler task was sent arguments that name nothing."""


def _name(task: str, what: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise SchedulerTaskError(f"{task}: {what} must be a non-empty name, got {value!r}")
    return value


def _retry(task: Task[Any, Any], exc: Exception) -> Exception:
    return task.retry(exc=exc, countdown=RETRY_DELAY * 2 ** min(task.request.retries, 5))


@app.task(name=tasknames.FORWARD_CONNECTION_EVENTS, bind=True, max_retries=MAX_RETRIES)
def forward_connection_events(self: Task[Any, Any], connection: str) -> None:
    """Move a connection's events into the trigger queues of the tenants holding them."""
    name = _name(self.name, "connection", connection)
    try:
        env, layouts = runtime()
        forwarding.forward_connection_events(env.client, layouts, env.nudge, name)
    except RETRYABLE as exc:
        raise _retry(self, exc) from exc


@app.task(name=tasknames.PROCESS_TENANT, bind=True, max_retries=MAX_RETRIES)
def process_tenant(self: Task[Any, Any], tenant: str) -> None:
    """Move a tenant's management and trigger events into its pipelines' queues."""
    name = _name(self.name, "tenant", tenant)
    try:
        env, layouts = runtime()
        forwarding.process_tenant(env.client, layouts, env.nudge, name)
    except RETRYABLE as exc:
        raise _retry(self, exc) from exc


@app.task(name=tasknames.PROCESS_PIPELINE, bind=True, max_retries=MAX_RETRIES)
def process_pipeline(self: Task[Any, Any], tenant: str, pipeline: str) -> bool:
    """Process one pipeline until quiet (False: another worker is on it)."""
    tenant_name = _name(self.name, "tenant", tenant)
    pipeline_name = _name(self.name, "pipeline", pipeline)
    try:
        env, _ = runtime()
        return run_pipeline(env, tenant_name, pipeline_name)
    except RETRYABLE as exc:
        raise _retry(self, exc) from exc
