"""Sending nudges by task name, so the scheduler never imports ``tasks/``.

A nudge names what to look at (a tenant and pipeline, a request uuid);
secrets and parameters never travel through the broker.
"""

from __future__ import annotations

import functools
from typing import Any

from celery import Celery
from kombu import Queue

from scheduler import tasknames
from scheduler.errors import SluiceError
from scheduler.settings import Settings, load_settings
from scheduler.zk.job_requests import JobRequest


class DispatchError(SluiceError, ValueError):
    """A nudge that cannot be sent as asked (an invalid zone name)."""


@functools.cache
def _client_app(broker_url: str) -> Celery:
    app = Celery("sluice-client", set_as_current=False)
    app.config_from_object("celeryconfig")
    app.conf.update(broker_url=broker_url, result_backend=broker_url)
    return app


def client_app(settings: Settings | None = None) -> Celery:
    """A Celery app for sending tasks and control commands (no task code)."""
    settings = settings or load_settings()
    return _client_app(settings.broker_url)


def send(name: str, *args: Any, settings: Settings | None = None, **options: Any) -> Any:
    """Send task ``name`` with identifier arguments; returns its AsyncResult."""
    return client_app(settings).send_task(name, args=list(args), **options)


# ---------------------------------------------------------------- builds and merges
# By task name (scheduler.tasknames), so senders never import tasks/.

EXECUTOR_QUEUE = "executor"


def executor_queue_name(zone: str | None = None) -> str:
    """The Celery queue of a zone's executors: ``executor`` or ``executor.<zone>``."""
    if zone is None:
        return EXECUTOR_QUEUE
    if not zone or any(c.isspace() or c == "," for c in zone):
        # A worker names its queues as a comma-separated -Q list.
        raise DispatchError(f"invalid executor zone {zone!r}")
    return f"{EXECUTOR_QUEUE}.{zone}"


def send_build(
    request_uuid: str, zone: str | None = None, *, settings: Settings | None = None
) -> Any:
    """Nudge an executor of ``zone`` to run the build request ``request_uuid``.

    The request must already be submitted to ``paths.executor_queue(zone)``;
    the message carries the uuid and the zone, nothing else.
    """
    kwargs = {"zone": zone} if zone is not None else {}
    return client_app(settings).send_task(
        tasknames.BUILD, args=[request_uuid], kwargs=kwargs, queue=executor_queue_name(zone)
    )


def send_merge(request_uuid: str, *, settings: Settings | None = None) -> Any:
    """Nudge a merger to run the merge request ``request_uuid`` (queue ``merger``)."""
    return client_app(settings).send_task(tasknames.MERGE, args=[request_uuid], queue="merger")


def queued_messages(queue: str, *, settings: Settings | None = None) -> int:
    """Messages waiting in the broker queue ``queue`` (0 if it does not exist).

    Messages reserved by a worker are not counted. The sweep compares this
    with the pending requests to decide whether nudges were lost.
    """
    app = client_app(settings)
    with app.connection_for_read() as connection, connection.channel() as channel:
        try:
            declared: Any = Queue(queue).bind(channel).queue_declare(passive=True)
        except connection.channel_errors:
            return 0
        return int(declared.message_count)


# ---------------------------------------------------------------- result events


def notify_pipeline(request: JobRequest, settings: Settings | None = None) -> None:
    """Nudge the pipeline that gets ``request``'s events (after one was emitted).

    The event itself is already committed in ZooKeeper; if this nudge is lost
    the sweep finds the pipeline's queued events and sends it again.
    """
    if request.tenant and request.pipeline and request.result_queue:
        send(tasknames.PROCESS_PIPELINE, request.tenant, request.pipeline, settings=settings)
