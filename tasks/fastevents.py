"""Task events published over the process's kept Redis connection (issue 17).

Flower follows tasks by their events: every task a worker runs sends three
(``task-received``, ``task-started``, ``task-succeeded``, the worker's own
batched as ``task.multi``). Through kombu's producer they cost a worker about
1.2 ms of CPU per task, as much as the rest of Celery's handling of a
Sluice nudge. With a plain ``redis://`` broker, :class:`FastEventDispatcher`
writes the message kombu would write (:func:`scheduler.quicksend.event_message`:
the same envelope, body, headers and delivery mode) and ``PUBLISH``es it on
the channel kombu's Redis transport publishes to (``/<db>.<exchange>/<routing
key>``), over the connection :mod:`scheduler.fastsend` keeps for the process.

It changes only how an event is written, never whether: the events are
the same, sent at the same moments. When the broker is anything else, the
app's configuration changes what an event message looks like
(:func:`channel_prefix`), an event holds more than plain JSON, or the
publish fails (then the process pauses the fast way, as for sends), kombu
publishes it as before, with its own buffering while the broker is away.
``broker.fast_send: false`` (``SLUICE_FAST_SEND=0``) leaves every event to
kombu too.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from celery.app.events import Events
from celery.events.dispatcher import EventDispatcher

from scheduler import fastsend, quicksend

if TYPE_CHECKING:
    from celery import Celery

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
    target = quicksend.redis_target(str(conf.broker_url or ""))
    alike = (
        conf.get(SETTING, False) is True
        and conf.event_serializer == "json"
        and not options.get("global_keyprefix")
        and options.get("fanout_prefix", True) is True
        and options.get("fanout_patterns", True) is True
    )
    return f"/{target.db}." if alike and target is not None else None


class FastEventDispatcher(EventDispatcher):
    """Celery's event dispatcher, publishing over the kept connection when it can."""

    # set by EventDispatcher.__init__ (celery-types does not declare them)
    app: Celery
    exchange: Any
    headers: dict[str, Any]
    delivery_mode: int

    def _publish(
        self, event: Any, producer: Any, routing_key: str, *args: Any, **kwargs: Any
    ) -> None:
        if producer is None:  # disabled or closed: nothing is published, as in Celery
            return
        if not self._publish_fast(event, routing_key):
            super()._publish(event, producer, routing_key, *args, **kwargs)  # type: ignore[misc]

    def _publish_fast(self, event: Any, routing_key: str) -> bool:
        prefix = channel_prefix(self.app)
        if prefix is None:
            return False
        sender = fastsend.pusher(str(self.app.conf.broker_url))
        if not sender.ready:
            return False
        exchange = self.exchange.name
        try:
            message = quicksend.event_message(
                event,
                exchange=exchange,
                routing_key=routing_key,
                headers=self.headers,
                delivery_mode=self.delivery_mode,
            )
        except (TypeError, ValueError):  # beyond plain JSON: kombu's encoder may know it
            return False
        return sender.publish(f"{prefix}{exchange}/{routing_key}", message)


class FastEvents(Events):
    """``app.events`` whose dispatchers are :class:`FastEventDispatcher`."""

    dispatcher_cls = f"{__name__}:FastEventDispatcher"
