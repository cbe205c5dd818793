"""The build task: a nudge naming an executor request; the work is in the service.

The service is :mod:`workers.executor.service`; docs/executor.md has the lifecycle.

``acks_late=False`` on purpose: the message is acknowledged when the task
starts, because a build may run for hours, longer than the broker's
visibility timeout, and must not be delivered again while it runs. What
protects the build is its ZooKeeper claim, not the message (docs/celery.md,
"Acknowledgement and redelivery"): a worker that dies after claiming leaves
a request that the sweep records as lost, and a message lost before the
claim is re-sent by the sweep from ``pending()``.

``ignore_result=True``: a build's outcome lives in ZooKeeper and SQL, and
Flower shows the task's states and return value from its events. Storing
the task's ``STARTED`` state and its result in the result backend cost two
Redis round trips each (Celery reads a state before it writes one), a tenth
of the executor process's time on a no-op build, for values nobody reads.
The backend holds a build's state only when there is one to follow: a
build that outlasts :data:`~workers.notify.PROGRESS_DELAY` stores its
``PROGRESS`` states and then its result over them (:func:`build`), and a
task that fails is stored all the same (``task_store_errors_even_if_ignored``),
so ``sluice retry`` finds it (docs/operations.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from celery import Task, states

from scheduler.errors import SluiceError
from scheduler.nudge import dispatch, task_names
from scheduler.processlocal import ProcessLocal
from scheduler.reporting.estimates import JobEstimates
from scheduler.settings.sections import Settings
from scheduler.zk.client import process_client
from tasks import retrying
from tasks.app import app
from tasks.runtime import runtime_settings
from workers.executor.service import execute, worker_name
from workers.notify import PROGRESS_DELAY, LaterProgress, no_progress

log = logging.getLogger(__name__)

# For a request without the scheduler's estimate (an older scheduler's): the
# estimates of each database, remembered as the scheduler remembers them
# (scheduler/reporting/estimates.py)
_estimates: ProcessLocal[str, JobEstimates] = ProcessLocal("estimates")


class BuildRequestError(SluiceError):
    """The task was sent with arguments that name no request."""


def _request_uuid(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise BuildRequestError(
            f"sluice.executor.build: request_uuid must be a uuid, got {value!r}"
        )
    return value


def _zone(value: object) -> str | None:
    if value is not None and (not isinstance(value, str) or not value):
        raise BuildRequestError(
            f"sluice.executor.build: zone must be a name or null, got {value!r}"
        )
    return value


@app.task(name=task_names.BUILD, bind=True, acks_late=False, ignore_result=True, **retrying.WORKER)
def build(self: Task[Any, Any], request_uuid: str, zone: str | None = None) -> dict[str, Any]:
    """Claim the build request ``request_uuid`` of ``zone`` and run it; its report.

    The result backend gets the report only over a ``PROGRESS`` state this
    build stored (see the module's docstring).
    """
    uuid, zone_name = _request_uuid(request_uuid), _zone(zone)
    settings = runtime_settings()
    client = process_client(settings.zookeeper)
    # PROGRESS only for a build that outlasts PROGRESS_DELAY (workers/notify.py);
    # closed before the result is stored, whatever the end
    progress = LaterProgress(_progress(self, settings), PROGRESS_DELAY, name=f"progress-{uuid[:8]}")
    try:
        report = execute(
            settings,
            client,
            uuid,
            zone_name,
            worker_name(self.request.hostname),
            notify=lambda request, delay=0.0: dispatch.notify_pipeline(request, settings, delay),
            progress=progress,
        )
    finally:
        progress.close()
    result = report.to_dict()
    if progress.published:
        _store_over_progress(self, result)
    return result


def _store_over_progress(task: Task[Any, Any], result: dict[str, Any]) -> None:
    """The build's result over the PROGRESS state it stored, which would stay otherwise."""
    request = task.request
    if request.id is None:  # called as a function: no state was stored (_progress)
        return
    try:
        task.backend.store_result(request.id, result, states.SUCCESS, request=request)
    except Exception:  # the build is done and reported; only the backend's view is stale
        log.warning("build task %s: result not stored over its PROGRESS", request.id, exc_info=True)


def _progress(task: Task[Any, Any], settings: Settings) -> Callable[[Mapping[str, Any]], None]:
    """The task's PROGRESS state: phase, elapsed seconds and the job's estimate.

    Readable with ``AsyncResult(task_id).info`` (the result backend keeps it),
    and sent as a ``task-progress`` event, so Flower shows the task in state
    PROGRESS with the phase while it runs. The estimate (the mean of the
    job's recent successful runs) comes with the request from the scheduler
    (``meta["estimate"]``: :mod:`scheduler.reporting.estimates`); for a
    request without one (an older scheduler's) SQL is asked here at the
    first publication; a database that cannot answer leaves it out.

    :class:`~workers.notify.LaterProgress` calls this only for a build that
    outlasts its delay (a short build stores no PROGRESS and asks SQL
    nothing), possibly from its timer thread. There ``task.request`` is
    empty and ``app.backend`` would be a new backend of that thread, so the
    task's request and backend are taken here, in the task's thread. The
    backend is shared safely: LaterProgress publishes one at a time and is
    closed before the task's thread stores the result.
    """
    request = task.request
    task_id, backend, events = request.id, task.backend, task.app.events
    if task_id is None:  # called as a function, not run as a task: no state to keep
        return no_progress
    estimate: list[float | None] = []

    def report(meta: Mapping[str, Any]) -> None:
        if not estimate:
            # the scheduler's, with the request (scheduler/reporting/estimates.py);
            # a request of an older scheduler has none: SQL is asked here
            sent = "estimate" in meta
            estimate.append(meta["estimate"] if sent else _query_estimate(settings, meta))
        progress = {**meta, "estimate": estimate[0]}
        # what task.update_state and task.send_event do, with the request taken above
        backend.store_result(task_id, progress, "PROGRESS", request=request)
        try:
            with events.default_dispatcher(hostname=request.hostname) as dispatcher:
                dispatcher.send("task-progress", uuid=task_id, retry=False, **progress)
        except Exception:  # an event is for people watching; the build goes on
            log.debug("task-progress event not sent", exc_info=True)

    return report


def _query_estimate(settings: Settings, meta: Mapping[str, Any]) -> float | None:
    """The job's estimate from SQL, as the scheduler would have sent it."""
    from scheduler.reporting import get_engine

    url = settings.database_url
    try:
        estimates = _estimates.get(url, lambda: JobEstimates(get_engine(url)))
    except Exception:
        log.warning("no duration estimate for %s", meta.get("about"), exc_info=True)
        return None
    tenant, job = str(meta.get("tenant", "")), str(meta.get("job", ""))
    return estimates.of(tenant, job, str(meta.get("project") or ""))
