"""Sending nudges by task name, so the scheduler never imports ``tasks/``.

A nudge names what to look at (a tenant and pipeline, a request uuid);
secrets and parameters never travel through the broker.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from scheduler import exposure, quicksend, tasklabels, tasknames
from scheduler.errors import SluiceError
from scheduler.settings import Settings, TLSSettings, load_settings
from scheduler.zk.job_requests import JobRequest

if TYPE_CHECKING:
    from celery import Celery


class DispatchError(SluiceError, ValueError):
    """A nudge that cannot be sent as asked (an invalid zone name)."""


@functools.cache
def _client_app(broker_url: str, tls: TLSSettings | None) -> Celery:
    from celery import Celery  # imported on first use: a CLI that only reads stays fast

    app = Celery("sluice-client", set_as_current=False)
    app.config_from_object("celeryconfig")
    ssl_options = exposure.broker_ssl_options(broker_url, tls)
    app.conf.update(
        broker_url=broker_url,
        result_backend=broker_url,
        broker_use_ssl=ssl_options or False,
        redis_backend_use_ssl=ssl_options,
    )
    return app


def client_app(settings: Settings | None = None) -> Celery:
    """A Celery app for sending tasks and control commands (no task code)."""
    settings = settings or load_settings()
    return _client_app(settings.broker_url, settings.broker.tls)


def check_broker(settings: Settings | None = None, timeout: int = 2) -> None:
    """Connect to the broker once; :class:`~scheduler.exposure.BrokerError` if that fails.

    The error names the broker (password redacted) and what failed:
    authentication, TLS or the connection. ``/health`` and ``sluice
    roundtrip`` ask this before anything waits on the broker.
    """
    from kombu import Connection

    settings = settings or load_settings()
    url = settings.broker_url
    ssl_options = exposure.broker_ssl_options(url, settings.broker.tls)
    try:
        with Connection(url, connect_timeout=timeout, ssl=ssl_options or False) as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, timeout=timeout)
    except Exception as exc:  # kombu wraps what redis-py or amqp raised: name it
        raise exposure.broker_error(url, exc) from None


def send(
    name: str, *args: Any, settings: Settings | None = None, label: str = "", **options: Any
) -> Any:
    """Send task ``name`` with identifier arguments; returns its AsyncResult.

    ``label`` says what the task is about (:mod:`scheduler.tasklabels`); Flower
    shows it as the task's arguments. Without one it is made from the arguments.
    """
    options.setdefault("argsrepr", label or tasklabels.label(name, args))
    app = client_app(settings)
    from kombu.exceptions import OperationalError  # loaded with Celery by client_app

    try:
        return app.send_task(name, args=list(args), **options)
    except (OperationalError, OSError, RuntimeError) as exc:
        # the broker refused or is gone (Celery's result store says RuntimeError)
        raise exposure.broker_error(str(app.conf.broker_url), exc) from exc


def send_quickly(name: str, *args: str, settings: Settings | None = None) -> str:
    """Send task ``name`` from a short-lived command; returns the task id.

    Pushes the message itself when the broker is a plain Redis URL (no
    Celery import, see :mod:`scheduler.quicksend`), through Celery otherwise
    or if that fails.
    """
    settings = settings or load_settings()
    queue = tasknames.queue_of(name)
    label = tasklabels.label(name, args)
    task_id = quicksend.send(settings.broker_url, name, list(args), queue, label)
    if task_id is None:
        task_id = str(send(name, *args, settings=settings, queue=queue, label=label).id)
    return task_id


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
    request_uuid: str,
    zone: str | None = None,
    *,
    settings: Settings | None = None,
    label: str = "",
) -> Any:
    """Nudge an executor of ``zone`` to run the build request ``request_uuid``.

    The request must already be submitted to ``paths.executor_queue(zone)``;
    the message carries the uuid and the zone, nothing else.
    """
    kwargs = {"zone": zone} if zone is not None else {}
    return client_app(settings).send_task(
        tasknames.BUILD,
        args=[request_uuid],
        kwargs=kwargs,
        queue=executor_queue_name(zone),
        argsrepr=label or tasklabels.label(tasknames.BUILD, [request_uuid, zone]),
    )


def send_merge(request_uuid: str, *, settings: Settings | None = None, label: str = "") -> Any:
    """Nudge a merger to run the merge request ``request_uuid`` (queue ``merger``)."""
    return client_app(settings).send_task(
        tasknames.MERGE,
        args=[request_uuid],
        queue="merger",
        argsrepr=label or tasklabels.label(tasknames.MERGE, [request_uuid]),
    )


def queued_messages(queue: str, *, settings: Settings | None = None) -> int:
    """Messages waiting in the broker queue ``queue`` (0 if it does not exist).

    Messages reserved by a worker are not counted. The sweep compares this
    with the pending requests to decide whether nudges were lost.
    """
    from kombu import Queue

    app = client_app(settings)
    with app.connection_for_read() as connection, connection.channel() as channel:
        try:
            declared: Any = Queue(queue).bind(channel).queue_declare(passive=True)
        except connection.channel_errors:
            return 0
        return int(declared.message_count)


# ---------------------------------------------------------------- result events


def notify_pipeline(
    request: JobRequest, settings: Settings | None = None, delay: float = 0.0
) -> None:
    """Nudge the pipeline that gets ``request``'s events (after one was emitted).

    The event itself is already committed in ZooKeeper; if this nudge is lost
    the sweep finds the pipeline's queued events and sends it again. A
    delayed nudge (a build's start) runs only if the result queue still
    holds events when it arrives (``if_results``).
    """
    if not (request.tenant and request.pipeline and request.result_queue):
        return
    if delay > 0:
        send(
            tasknames.PROCESS_PIPELINE,
            request.tenant,
            request.pipeline,
            settings=settings,
            kwargs={"if_results": True},
            countdown=delay,
        )
    else:
        send(tasknames.PROCESS_PIPELINE, request.tenant, request.pipeline, settings=settings)
