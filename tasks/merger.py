"""The merge task: a nudge naming a merger request; the work is in the service.

The service is :mod:`workers.merger.service`; docs/merger.md has the
request's lifecycle in ZooKeeper.

``acks_late=True`` (the default of short tasks, spelled out): a merge takes
seconds, far below the broker's visibility timeout, and is idempotent by
request id. A message whose worker died before the claim comes back and
runs; one that comes back after the claim finds the request claimed or
completed and returns (docs/celery.md, "Acknowledgement and redelivery").

``ignore_result=True``, as for builds: a merge's outcome lives in
ZooKeeper (its result, read by the scheduler), and Flower shows the task's
states and return value from its events. Storing its ``STARTED`` state and
its result cost four Redis round trips a merge, on the chain from a new
change to its first build; a task that fails is stored all the same
(``task_store_errors_even_if_ignored``), so ``sluice retry`` finds it.
"""

from __future__ import annotations

from typing import Any

from celery import Task

from scheduler.errors import SluiceError
from scheduler.nudge import dispatch, task_names
from scheduler.reconfiguration import apply_requests, fetch_with
from scheduler.zk.client import process_client
from tasks import retrying
from tasks.app import app
from tasks.runtime import runtime_settings
from workers.merger.reconfigure import local_runner
from workers.merger.service import execute, process_cache, worker_name


class MergeRequestError(SluiceError):
    """The task was sent with arguments that name no request."""


@app.task(name=task_names.MERGE, bind=True, acks_late=True, ignore_result=True, **retrying.WORKER)
def run(self: Task[Any, Any], request_uuid: str) -> dict[str, Any]:
    """Claim the merge request ``request_uuid``, run its job and store its result in ZooKeeper."""
    if not isinstance(request_uuid, str) or not request_uuid:
        raise MergeRequestError(f"{task_names.MERGE}: request_uuid must be a non-empty string")
    settings = runtime_settings()
    client = process_client(settings.zookeeper)
    report = execute(
        settings,
        client,
        request_uuid,
        worker_name(self.request.hostname),
        notify=lambda request, delay=0.0: dispatch.notify_pipeline(request, settings, delay),
    )
    return report.to_dict()


@app.task(name=task_names.RECONFIGURE, bind=True, acks_late=True, **retrying.WORKER)
def reconfigure(self: Task[Any, Any], tenant: str) -> bool:
    """Apply ``tenant``'s reconfiguration requests (a nudge: they are in ZooKeeper).

    The brain's reconfiguration reads the config through this worker's own
    repo cache: its merger jobs run here (:func:`workers.merger.reconfigure.local_runner`),
    not through the merger queue. True if there were requests.
    """
    if not isinstance(tenant, str) or not tenant:
        raise MergeRequestError(f"{task_names.RECONFIGURE}: tenant must be a non-empty name")
    settings = runtime_settings()
    client = process_client(settings.zookeeper)
    fetch = fetch_with(local_runner(process_cache(settings)))
    return apply_requests(client, settings, tenant, fetch)
