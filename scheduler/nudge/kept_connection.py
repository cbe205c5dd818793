"""Task messages and task events pushed over a kept Redis connection: long-lived processes.

Celery's ``send_task`` costs about 0.9 ms of CPU per message in the sender
(kombu's producer and its retry policy, and a ``task-sent`` event for
Flower), and workers send all the time: a pipeline nudge after every build
and merge, the builds and merges themselves. With a plain ``redis://``
broker, :func:`send` writes the message Celery would write
(:func:`scheduler.nudge.envelope.task_message`, naming the task it is sent from
as parent and that task's root as root, as ``send_task`` does) and
``LPUSH``es it with redis-py over one connection per process and broker
URL, kept for the life of the process: a
:class:`~scheduler.processlocal.ProcessLocal`, so a forked pool child makes
its own, and a worker's shutdown closes it.

It can only make a send cheaper, never lose one. :func:`send` returns None,
and the caller sends through Celery (:func:`scheduler.nudge.dispatch.send`), when
the broker is anything else, when the app's configuration changes what a
message looks like (:func:`writes_alike`), when an argument is no plain
JSON (kombu's encoder knows more types), or when the push fails (refused,
timed out, reset). After a failure the process leaves the fast path alone
for :data:`PAUSE` seconds, so a broker that is down costs one failed
attempt, not one per send. A connection Redis closed (a restart) is opened
again at once, once. Should a reply be lost after Redis took the message,
the message may be sent twice; every Sluice task is an idempotent nudge, so
that is harmless where a lost nudge would wait for the sweep. A broker that
refuses the password is no failure to route around: Celery would be
refused alike, after seconds of retries, so a
:class:`~scheduler.settings.exposure.BrokerError` says so at once.

What it leaves out is Celery's ``task-sent`` event: Flower shows the task
from the moment a worker receives it. ``broker.fast_send: false`` in
``sluice.yaml`` (``SLUICE_FAST_SEND=0``) sends everything through Celery.

**Task events** (issue 17). Flower follows tasks by their events: every
task a worker runs sends three (``task-received``, ``task-started``,
``task-succeeded``, the worker's own batched as ``task.multi``). Through
kombu's producer they cost a worker about 1.2 ms of CPU per task, as much
as the rest of Celery's handling of a Sluice nudge. :func:`publish_event`
writes the message kombu would write
(:func:`scheduler.nudge.envelope.event_message`: the same envelope, body,
headers and delivery mode) and ``PUBLISH``es it on the channel kombu's
Redis transport publishes to (``/<db>.<exchange>/<routing key>``) over the
same connection. It changes only how an event is written, never whether:
when the broker is anything else, the app's configuration changes what an
event message looks like (:func:`channel_prefix`), an event holds more than
plain JSON, or the publish fails (then the process pauses the fast way, as
for sends), it returns False and kombu publishes the event as before, with
its own buffering while the broker is away. The worker's event dispatcher
that calls it is the Celery app's (``tasks/fastevents.py``).
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from scheduler.nudge import envelope, fresh_socket
from scheduler.processlocal import ProcessLocal
from scheduler.settings import exposure

if TYPE_CHECKING:
    from celery import Celery
    from celery.result import AsyncResult

log = logging.getLogger(__name__)

# Seconds a process sends through Celery after a failed push.
PAUSE = 30.0
# Seconds to connect, and to wait for Redis's reply, before Celery sends instead.
TIMEOUT = fresh_socket.CONNECT_TIMEOUT


class Pusher:
    """``LPUSH`` onto one broker's lists over a kept connection; one per process and URL."""

    def __init__(self, broker_url: str) -> None:
        self.broker_url = broker_url
        self.paused_until = 0.0
        self.client: redis.Redis | None = None
        target = envelope.redis_target(broker_url)
        if target is not None:
            self.client = redis.Redis(
                host=target.host,
                port=target.port,
                db=target.db,
                username=target.username,
                password=target.password,
                socket_timeout=TIMEOUT,
                socket_connect_timeout=TIMEOUT,
                # once more on a fresh connection, at once; a timeout is not retried
                retry=Retry(NoBackoff(), 1, supported_errors=(redis.ConnectionError,)),
            )

    @property
    def ready(self) -> bool:
        """A plain Redis broker, and no failure in the last :data:`PAUSE` seconds."""
        return self.client is not None and time.monotonic() >= self.paused_until

    def push(self, queue: str, message: bytes) -> bool:
        """``LPUSH`` ``message`` onto ``queue``; False if it failed (now paused)."""
        client = self.client
        assert client is not None
        return self._done(lambda: client.lpush(queue, message))

    def publish(self, channel: str, message: bytes) -> bool:
        """``PUBLISH`` ``message`` on ``channel``; False if it failed (now paused)."""
        client = self.client
        assert client is not None
        return self._done(lambda: client.publish(channel, message))

    def set_if_absent(self, key: str, ttl_ms: int) -> bool | None:
        """``SET key NX PX ttl_ms``: whether it was set; None if it failed (now paused)."""
        client = self.client
        assert client is not None
        answer: list[bool] = []
        if not self._done(lambda: answer.append(bool(client.set(key, b"1", nx=True, px=ttl_ms)))):
            return None
        return answer[0]

    def _done(self, command: Callable[[], object]) -> bool:
        try:
            command()
        except (redis.RedisError, OSError) as exc:
            failure = exposure.broker_failure(exc)
            if failure.startswith("authentication failed"):
                raise exposure.broker_error(self.broker_url, exc) from None
            self.paused_until = time.monotonic() + PAUSE
            log.warning(
                "broker %s: %s; sending through Celery for %.0f s",
                exposure.redact(self.broker_url),
                failure,
                PAUSE,
            )
            return False
        return True

    def close(self) -> None:
        if self.client is not None:
            self.client.close()


_pushers: ProcessLocal[str, Pusher] = ProcessLocal("broker pusher", close=Pusher.close)


def pusher(broker_url: str) -> Pusher:
    """This process's :class:`Pusher` for ``broker_url`` (made on first use after a fork)."""
    return _pushers.get(broker_url, lambda: Pusher(broker_url))


@functools.cache
def writes_alike(app: Celery) -> bool:
    """Whether ``app``'s messages look like :func:`~scheduler.nudge.envelope.task_message`'s.

    Protocol 2 with a JSON body, uncompressed, no default priority (another
    list key), no key prefix: otherwise Celery sends.
    """
    conf = app.conf
    return bool(
        conf.task_protocol == 2
        and conf.task_serializer == "json"
        and not conf.task_compression
        and conf.task_default_priority is None
        and not conf.task_inherit_parent_priority
        and not (conf.broker_transport_options or {}).get("global_keyprefix")
    )


def send(
    app: Celery,
    broker_url: str,
    name: str,
    args: list[Any],
    *,
    kwargs: dict[str, Any],
    queue: str,
    label: str,
) -> AsyncResult[Any] | None:
    """Push task ``name`` onto ``queue``; its AsyncResult, or None when Celery must send it.

    Called inside a task, the message names it as parent and its root as
    root, and the task keeps the result among its children, as with
    ``send_task``.
    """
    sender = pusher(broker_url)
    if not sender.ready or not writes_alike(app):
        return None
    task_id = str(uuid.uuid4())
    parent = app.current_worker_task
    parent_id = root_id = None
    if parent is not None:
        parent_id = parent.request.id
        root_id = parent.request.root_id or parent_id
    try:
        message = envelope.task_message(
            name,
            args,
            kwargs,
            queue,
            task_id=task_id,
            label=label,
            parent_id=parent_id,
            root_id=root_id,
            reply_to=app.thread_oid,
        )
    except (TypeError, ValueError):  # beyond plain JSON: kombu's encoder may know it
        return None
    if not sender.push(queue, message):
        return None
    result = app.AsyncResult(task_id)
    if parent is not None:
        parent.add_trail(result)
    return result


# ---------------------------------------------------------------- task events

# Celery's app setting (celeryconfig.py) that lets the workers' events go the fast way.
SETTING = "sluice_fast_events"


@functools.cache
def channel_prefix(app: Celery) -> str | None:
    """The start of the event channels kombu publishes to (``/<db>.``); None: kombu publishes.

    A plain Redis broker, JSON events, and kombu's default fanout layout
    (prefix with the database number, routing key in the channel; no global
    key prefix), with :data:`SETTING` on.
    """
    conf = app.conf
    options = conf.broker_transport_options or {}
    target = envelope.redis_target(str(conf.broker_url or ""))
    alike = (
        conf.get(SETTING, False) is True
        and conf.event_serializer == "json"
        and not options.get("global_keyprefix")
        and options.get("fanout_prefix", True) is True
        and options.get("fanout_patterns", True) is True
    )
    return f"/{target.db}." if alike and target is not None else None


def publish_event(
    app: Celery,
    event: Any,
    *,
    exchange: str,
    routing_key: str,
    headers: dict[str, Any],
    delivery_mode: int,
) -> bool:
    """``PUBLISH`` a Celery event (or a ``task.multi`` list) as kombu would; False: kombu must."""
    prefix = channel_prefix(app)
    if prefix is None:
        return False
    sender = pusher(str(app.conf.broker_url))
    if not sender.ready:
        return False
    try:
        message = envelope.event_message(
            event,
            exchange=exchange,
            routing_key=routing_key,
            headers=headers,
            delivery_mode=delivery_mode,
        )
    except (TypeError, ValueError):  # beyond plain JSON: kombu's encoder may know it
        return False
    return sender.publish(f"{prefix}{exchange}/{routing_key}", message)
