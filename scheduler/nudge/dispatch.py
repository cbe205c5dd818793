"""Sending nudges by task name, so the scheduler never imports ``tasks/``.

A nudge names what to look at (a tenant and pipeline, a request uuid);
secrets and parameters never travel through the broker. With a plain
``redis://`` broker, a send Celery adds nothing to is pushed by Sluice
itself: over a connection the process keeps (:mod:`scheduler.nudge.kept_connection`),
or, from a short-lived command, over a fresh socket without importing
Celery (:mod:`scheduler.nudge.fresh_socket`).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from scheduler.nudge import fresh_socket, task_labels, task_names
from scheduler.settings import exposure
from scheduler.settings.load import load_settings
from scheduler.settings.sections import Settings, TLSSettings
from scheduler.stores.job_requests import JobRequest

if TYPE_CHECKING:
    from celery import Celery


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
    """Connect to the broker once; :class:`~scheduler.settings.exposure.BrokerError` if that fails.

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


# What a send may ask and still go the fast way (scheduler/nudge/kept_connection.py): the
# rest (countdown, eta, expires, priority, headers, links, retry policy...)
# only Celery honours.
FAST_OPTIONS = frozenset({"queue", "kwargs", "argsrepr"})


def send(
    name: str, *args: Any, settings: Settings | None = None, label: str = "", **options: Any
) -> Any:
    """Send task ``name`` with identifier arguments; returns its AsyncResult.

    ``label`` says what the task is about (:mod:`scheduler.nudge.task_labels`); Flower
    shows it as the task's arguments. Without one it is made from the arguments.
    With a plain ``redis://`` broker and no option but ``queue`` and
    ``kwargs``, the message is pushed over the process's kept connection
    (:mod:`scheduler.nudge.kept_connection`, no ``task-sent`` event); otherwise, or if
    that fails, Celery sends it.
    """
    settings = settings or load_settings()
    options.setdefault("argsrepr", label or task_labels.label(name, args))
    app = client_app(settings)
    result = _send_fast(app, settings, name, list(args), options)
    if result is None:
        result = _send_through_celery(app, name, list(args), options)
    return result


def _send_through_celery(app: Celery, name: str, args: list[Any], options: dict[str, Any]) -> Any:
    from kombu.exceptions import OperationalError  # loaded with Celery by client_app

    try:
        return app.send_task(name, args=args, **options)
    except (OperationalError, OSError, RuntimeError) as exc:
        # the broker refused or is gone (Celery's result store says RuntimeError)
        raise exposure.broker_error(str(app.conf.broker_url), exc) from exc


def _send_fast(
    app: Celery, settings: Settings, name: str, args: list[Any], options: dict[str, Any]
) -> Any:
    """The AsyncResult of a send over the kept connection; None if Celery must send it."""
    queue = options.get("queue") or task_names.queue_of(name)
    kwargs = options.get("kwargs") or {}
    if not (
        settings.broker.fast_send
        and options.keys() <= FAST_OPTIONS
        and isinstance(queue, str)
        and isinstance(kwargs, dict)
        and isinstance(options["argsrepr"], str)
    ):
        return None
    from scheduler.nudge import kept_connection  # redis-py: not for the commands that never send

    label: str = options["argsrepr"]
    return kept_connection.send(
        app, settings.broker_url, name, args, kwargs=kwargs, queue=queue, label=label
    )


def send_quickly(name: str, *args: str, settings: Settings | None = None) -> str:
    """Send task ``name`` from a short-lived command; returns the task id.

    Pushes the message itself when the broker is a plain Redis URL (no
    Celery import, see :mod:`scheduler.nudge.fresh_socket`), through Celery otherwise,
    if that fails, or with ``broker.fast_send`` off.
    """
    settings = settings or load_settings()
    queue = task_names.queue_of(name)
    label = task_labels.label(name, args)
    task_id = None
    if settings.broker.fast_send:
        task_id = fresh_socket.send(settings.broker_url, name, list(args), queue, label)
    if task_id is None:  # not for the fast path either: Celery
        options = {"queue": queue, "argsrepr": label}
        task_id = str(_send_through_celery(client_app(settings), name, list(args), options).id)
    return task_id


# ---------------------------------------------------------------- builds and merges
# By task name (scheduler.nudge.task_names), so senders never import tasks/.


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
    return send(
        task_names.BUILD,
        request_uuid,
        settings=settings,
        label=label or task_labels.label(task_names.BUILD, [request_uuid, zone]),
        kwargs=kwargs,
        queue=task_names.executor_queue_name(zone),
    )


def send_merge(request_uuid: str, *, settings: Settings | None = None, label: str = "") -> Any:
    """Nudge a merger to run the merge request ``request_uuid`` (queue ``merger``)."""
    return send(task_names.MERGE, request_uuid, settings=settings, label=label, queue="merger")


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
    holds events when it arrives (``if_results``). An immediate one is not
    sent while another nudge of the pipeline waits to start
    (:mod:`scheduler.nudge.pending_marks`): that one's pass reads this event.
    """
    if not (request.tenant and request.pipeline and request.result_queue):
        return
    settings = settings or load_settings()
    if delay > 0:
        send(
            task_names.PROCESS_PIPELINE,
            request.tenant,
            request.pipeline,
            settings=settings,
            kwargs={"if_results": True},
            countdown=delay,
        )
        return
    from scheduler.nudge import pending_marks  # redis-py: only workers notify

    if pending_marks.should_send(settings, request.tenant, request.pipeline):
        send(task_names.PROCESS_PIPELINE, request.tenant, request.pipeline, settings=settings)
