"""Scheduler tasks: the event hops and pipeline processing (``scheduler`` queue).

Each takes names only and is idempotent: a duplicate delivery finds the
events moved, or the pipeline lock taken (it raises the dirty flag and
returns), or nothing to do. ``acks_late`` with ``task_reject_on_worker_lost``
(celeryconfig): a worker killed mid-task gets its message redelivered, and
the redelivery resumes from ZooKeeper.

Their results are not stored (``ignore_result``): a hop's return value says
nothing anyone reads (Flower shows it from the task's events), and storing
its STARTED and SUCCESS states cost two writes to the result backend per
pass, several per build. A hop that fails is stored all the same
(``task_store_errors_even_if_ignored``), so ``sluice retry`` finds it.
"""

from __future__ import annotations

from typing import Any

from celery import Task

from scheduler import logcontext
from scheduler.drivers import webhooks
from scheduler.errors import SluiceError
from scheduler.nudge import dispatch, pending_marks, task_names
from scheduler.processing import forwarding
from scheduler.processing.pipeline import process_pipeline as run_pipeline
from scheduler.wire.events import TriggerEvent
from scheduler.zk import paths
from scheduler.zk.event_queue import EventQueue
from tasks import retrying
from tasks.app import app
from tasks.runtime import runtime, runtime_settings


class SchedulerTaskError(SluiceError):
    """A scheduler task was sent arguments that name nothing."""


def _name(task: str, what: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise SchedulerTaskError(f"{task}: {what} must be a non-empty name, got {value!r}")
    return value


@app.task(
    name=task_names.FORWARD_CONNECTION_EVENTS, bind=True, ignore_result=True, **retrying.SCHEDULER
)
def forward_connection_events(self: Task[Any, Any], connection: str) -> None:
    """Move a connection's events into the trigger queues of the tenants holding them."""
    name = _name(self.name, "connection", connection)
    env, layouts = runtime()
    settings = runtime_settings()
    found = settings.connections.get(name)

    def wanted(trigger: TriggerEvent) -> bool:  # (read nothing for what nobody listens to)
        return layouts.could_trigger(name, trigger)

    wait = forwarding.forward_connection_events(
        env.client,
        layouts,
        env.nudge,
        name,
        translate=webhooks.translator(found, wanted),
        retry=webhooks.retry_policy(found),
    )
    if wait is not None:  # deferred deliveries: again when the first is due (and by the sweep)
        dispatch.send(task_names.FORWARD_CONNECTION_EVENTS, name, settings=settings, countdown=wait)


@app.task(name=task_names.PROCESS_TENANT, bind=True, ignore_result=True, **retrying.SCHEDULER)
def process_tenant(self: Task[Any, Any], tenant: str) -> None:
    """Move a tenant's management and trigger events into its pipelines' queues."""
    name = _name(self.name, "tenant", tenant)
    env, layouts = runtime()
    with logcontext.bound(tenant=name):
        forwarding.process_tenant(env.client, layouts, env.nudge, name)


@app.task(name=task_names.PROCESS_PIPELINE, bind=True, ignore_result=True, **retrying.SCHEDULER)
def process_pipeline(
    self: Task[Any, Any], tenant: str, pipeline: str, if_results: bool = False
) -> bool:
    """Process one pipeline until quiet (False: another worker is on it or nothing to do).

    ``if_results``: a delayed nudge about a build's start; it works only if
    the pipeline's result queue still holds events (one stat otherwise).
    """
    tenant_name = _name(self.name, "tenant", tenant)
    pipeline_name = _name(self.name, "pipeline", pipeline)
    # before any queue is read: a result from now on nudges again
    pending_marks.started(runtime_settings(), tenant_name, pipeline_name)
    env, _ = runtime()
    if (
        if_results
        and not EventQueue(
            env.client, paths.pipeline_result_queue(tenant_name, pipeline_name)
        ).length()
    ):
        return False  # a pass applied the start already (with the build's end)
    with logcontext.bound(tenant=tenant_name, pipeline=pipeline_name):
        return run_pipeline(env, tenant_name, pipeline_name)
